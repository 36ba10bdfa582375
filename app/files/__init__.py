"""`htm load`: markdown and text files as memories, kept in sync with the files."""
