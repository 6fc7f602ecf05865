"""The identity codec: the payload is the document."""


def encode(data: bytes, level: int) -> bytes:
    return bytes(data)


def decode(payload: bytes) -> bytes:
    return bytes(payload)
