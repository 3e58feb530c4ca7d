"""The published package's service-side modules that this service keeps (``service.config``)."""
