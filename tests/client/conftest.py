"""The service tests' loopback fronts, reused by the client tests."""

from tests.service.conftest import make_front

__all__ = ["make_front"]
