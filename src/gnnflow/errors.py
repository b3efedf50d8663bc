"""Errors a user can cause.  The CLI prints them as one line and exits non-zero."""


class GnnflowError(Exception):
    """A problem with user input (a path, a file, a config value, a download).

    The message names the thing and says what to do; the CLI prints it without a
    traceback.
    """


class StoreError(GnnflowError):
    """A graph store, partition book or array file on disk is missing or malformed."""


class ConfigError(GnnflowError):
    """A bad option or config value."""


class ResourceError(GnnflowError):
    """A run would not fit this host (the memory preflight, gnnflow.strategies.memory)."""


class DownloadError(GnnflowError):
    """A dataset download failed (offline, unknown name, bad checksum)."""


class DistributedError(GnnflowError):
    """A rank failed or a distributed wait timed out."""


class RankLost(DistributedError):
    """A rank died, stopped or stopped making progress (found by its host's launcher), or a host
    was lost: a fault of the run's processes, which a restart from a checkpoint may get past
    (``--max-restarts``), unlike a rank's own error."""


class NotFiniteLoss(GnnflowError):
    """A training loss became NaN or infinite: the run stops, on every rank."""


class Terminated(BaseException):
    """This process was asked to stop (SIGTERM, SIGHUP) and stopped what it had started.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it;
    the CLI exits with 128 + the signal number.
    """

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
