"""Domain errors: why a request cannot be answered, in the engine's words. No HTTP here: each
protocol of service.api maps these classes to its own status, headers and body, in one table.

Messages never carry a stack trace or the client's input.
"""

from __future__ import annotations

FIELD = "{field}"  # in a message: where the field's name goes, as the request's protocol names it


class ServiceError(Exception):
    """`field`: the request field at fault, in the engine's vocabulary ("inputs", "dimensions");
    a protocol may name it its own way (OpenAI's `input`), in its body and in the message."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def render(self, names: dict[str, str] | None = None) -> str:
        """The message, the field named as `names` (a protocol's) calls it."""
        if self.field is None:
            return self.message
        return self.message.replace(FIELD, (names or {}).get(self.field, self.field))

    def __str__(self) -> str:
        return self.render()


class InvalidRequest(ServiceError):
    """The request is malformed: empty, wrongly framed, of the wrong type."""


class NotFound(ServiceError):
    """No such model (or version)."""


class TooLarge(ServiceError):
    """Well-formed, but over a limit: inputs, characters, attention or response bytes."""


class Validation(ServiceError):
    """Well-formed, but not valid for this model: an index out of range, too many tokens."""


class Overloaded(ServiceError):
    """No room now (queue, in-flight response bytes, analytics tokens); the same request may
    succeed shortly. `retry_after`: seconds until it likely would, where the engine can tell."""

    def __init__(self, message: str, field: str | None = None, retry_after: int | None = None):
        super().__init__(message, field)
        self.retry_after = retry_after


class NotReady(ServiceError):
    """Not loaded yet, draining, or shutting down."""


class Disconnected(Exception):
    """The client went away before its request reached inference."""
