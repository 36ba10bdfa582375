"""`/ui`: a small read-only dashboard, a static page over the REST API."""
