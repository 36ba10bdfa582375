"""The HTTP layer: routes (routes/), the dependencies a route is given (deps.py), the route
class that identifies the caller before reading a body (routing.py), the body gate
(middleware.py), the uvicorn protocol with header deadlines (protocol.py), problem+json for
every error (problems.py), the OpenAPI contract (openapi.py) and `htm serve`'s server
(serving.py). It stands above the domain packages, which never import it."""
