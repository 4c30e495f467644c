"""What an answer adds to a correlation-capped book (issue 39, item 2): the rule lives in
`alpha_gym.scoring.book_gain` (the verifier's R14 `book` reads it, and scoring may not import evaluation);
this module keeps the evaluation-side names."""

from alpha_gym.scoring.book_gain import BOOK_METRICS, BookGain, Candidate, Gain, book_gain

__all__ = ["BOOK_METRICS", "BookGain", "Candidate", "Gain", "book_gain"]
