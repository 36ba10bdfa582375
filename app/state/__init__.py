"""A robot's state: small JSON values by key, with versions, expiry and pins (issue 48)."""
