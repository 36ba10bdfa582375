"""Recall: search strategies and timeframes over long-term memory."""
