"""The identity codec: the payload is the document."""
from . import Codec, register

register(Codec("identity", lambda data, level: bytes(data), bytes))
