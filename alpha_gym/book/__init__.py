"""The book: formula values -> dollar-neutral weights -> P&L, costs and statistics."""

from alpha_gym.book.book import Book, build_book, daily_turnover, open_to_open_returns, weights_from_signal
from alpha_gym.book.costs import RealisticCosts, TrainingCosts, realistic_cost, training_cost
from alpha_gym.book import metrics

__all__ = ["Book", "RealisticCosts", "TrainingCosts", "build_book", "daily_turnover", "metrics",
           "open_to_open_returns", "realistic_cost", "training_cost", "weights_from_signal"]
