"""Closing a day: the PSPs' payouts fetched and stored (``payouts``), matched to bank credits (``match``), and the
close itself (``close``): what was paid out, what reached the bank, and every exception (docs/operations.md,
"Closing a day")."""
