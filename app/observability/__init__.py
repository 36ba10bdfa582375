"""What each request leaves behind for operators: its id (request_id.py), its log line and
the process's log format (logs.py), and its duration in /metrics (middleware.py)."""
