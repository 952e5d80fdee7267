"""dc's exceptions: each carries dc's own one-line message (libdcrt's or the command's)."""


class Error(RuntimeError):
    """Base of every dc error. `status` is libdcrt's status name where one applies."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status


class LoadError(Error):
    """A plan that is missing, corrupt or truncated, or no usable device."""


class InputError(Error, ValueError):
    """A missing or unknown input, or one of the wrong shape, dtype or device."""


class RunError(Error):
    """A kernel failed while running."""


class UnsupportedError(Error):
    """Something the device cannot do, e.g. timing on the host emulator."""


class TuneError(Error):
    """dc-coordinator tune failed; `output` holds what it printed."""

    def __init__(self, message, output="", returncode=None):
        super().__init__(message)
        self.output = output
        self.returncode = returncode


class UnsupportedOpsError(TuneError):
    """The model uses operators dc does not implement; `ops` names them."""

    def __init__(self, message, ops, output="", returncode=None):
        super().__init__(message, output, returncode)
        self.ops = ops


class PlanWarning(UserWarning):
    """A notice from loading a plan, e.g. one tuned for another GPU type."""


_BY_STATUS = {
    "DCRT_ERROR_INVALID_ARGUMENT": InputError,
    "DCRT_ERROR_LOAD": LoadError,
    "DCRT_ERROR_NOT_READY": InputError,
    "DCRT_ERROR_RUN": RunError,
    "DCRT_ERROR_UNSUPPORTED": UnsupportedError,
    "DCRT_ERROR_OUT_OF_MEMORY": Error,
    "DCRT_ERROR_INTERNAL": Error,
}


def from_dcrt(e):
    """dc._dcrt.Error(status, message) -> the matching dc exception."""
    status, message = e.args if len(e.args) == 2 else ("DCRT_ERROR_INTERNAL", str(e))
    return _BY_STATUS.get(status, Error)(message, status)
