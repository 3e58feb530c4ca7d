"""The worker's page-image wire codec; it lives in ``ragspine_services.common.page_wire`` (the front uses it
too, and the front never imports worker modules). Kept importable from here."""

from ragspine_services.common.page_wire import (
    DEFAULT_MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS,
    decode_png_images,
    encode_png,
    pack_multivector,
    unpack_multivector,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "decode_png_images",
    "encode_png",
    "pack_multivector",
    "unpack_multivector",
]
