"""Alpha101-style formulas that seed the novelty archive (from Kakushadze 2016, in the paper's own spelling)."""

SEED_FORMULAS: tuple[str, ...] = (
    "(rank(Ts_ArgMax(SignedPower(((returns < 0) ? stddev(returns, 20) : close), 2.), 5)) - 0.5)",  # 1
    "(-1 * correlation(rank(delta(log(volume), 2)), rank(((close - open) / open)), 6))",             # 2
    "(-1 * correlation(rank(open), rank(volume), 10))",                                             # 3
    "(-1 * Ts_Rank(rank(low), 9))",                                                                 # 4
    "(-1 * correlation(open, volume, 10))",                                                         # 6
    "(sign(delta(volume, 1)) * (-1 * delta(close, 1)))",                                            # 12
    "(-1 * rank(covariance(rank(close), rank(volume), 5)))",                                        # 13
    "((-1 * rank(delta(returns, 3))) * correlation(open, volume, 10))",                             # 14
    "(-1 * sum(rank(correlation(rank(high), rank(volume), 3)), 3))",                                # 15
    "(-1 * rank(covariance(rank(high), rank(volume), 5)))",                                         # 16
    "(-1 * rank(((stddev(abs((close - open)), 5) + (close - open)) + correlation(close, open, 10))))",  # 18
    "(((-1 * rank((open - delay(high, 1)))) * rank((open - delay(close, 1)))) * rank((open - delay(low, 1))))",  # 20
    "(-1 * (delta(correlation(high, volume, 5), 5) * rank(stddev(close, 20))))",                    # 22
    "(-1 * ts_max(correlation(Ts_Rank(volume, 5), Ts_Rank(high, 5), 5), 3))",                       # 26
    "rank((-1 * ((1 - (open / close))^1)))",                                                        # 33
    "rank(((1 - rank((stddev(returns, 2) / stddev(returns, 5)))) + (1 - rank(delta(close, 1)))))",  # 34
    "((-1 * rank(Ts_Rank(close, 10))) * rank((close / open)))",                                     # 38
    "((-1 * rank(stddev(high, 10))) * correlation(high, volume, 10))",                              # 40
    "(((high * low)^0.5) - vwap)",                                                                  # 41
    "(rank((vwap - close)) / rank((vwap + close)))",                                                # 42
    "(-1 * correlation(high, rank(volume), 5))",                                                    # 44
    "(-1 * delta((((close - low) - (high - close)) / (close - low)), 9))",                          # 53
    "((-1 * ((low - close) * (open^5))) / ((low - high) * (close^5)))",                             # 54
    "((close - open) / ((high - low) + .001))",                                                     # 101
)
