"""The web reviewer: a FastAPI app over :mod:`testset_builder.stages.review`, served by ``testset-builder serve``.

Pages are rendered on the server with Jinja2 (autoescaped) and updated with htmx, which the package carries (no
CDN). The same verdicts go through a JSON API that scripts can use. Every request needs the workspace's review token
(``Authorization: Bearer TOKEN``, or the cookie the page sets once the token has been given in its URL).
"""

from .app import create_app

__all__ = ["create_app"]
