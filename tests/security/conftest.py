"""The security suite reuses the service tests' loopback front and worker fixtures."""

from tests.service.conftest import make_front, make_worker  # noqa: F401
