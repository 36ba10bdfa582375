"""Moving memories in and out of a namespace from the command line: `htm export`, `htm
import`, `htm reembed`, `htm reindex` (and the sync step `htm load` shares). They run in the
CLI's process on the app's components (app/lifespan.py `open_components`, called by
app/cli.py) and write through the same services as the REST API."""
