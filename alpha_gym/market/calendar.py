"""The trading calendar's one constant: sessions a year, for annualising anything daily.

It sits on the market floor so the synthetic market (which plants yearly drifts and volatilities)
and the book's statistics read the same number without the market importing the book.
"""

TRADING_DAYS = 252
