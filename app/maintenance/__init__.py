"""Scheduled reflection ("sleep time"): a namespace's maintenance runs, on a cron schedule or
asked for, each step recorded as it finishes so a run cut off is finished by the next."""
