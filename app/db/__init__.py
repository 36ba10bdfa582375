"""Database engine, session and table definitions shared by every domain package."""
