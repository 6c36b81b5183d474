"""Types of the compiled read path (``_rawread.c``); built where a C compiler was at hand, absent otherwise."""

from collections.abc import Callable

from latscope.wire.kstamps import ClockOffset

class StampedReader:
    """One kernel-stamped read per call, for ``loop.add_reader``: what ``StampedSocket._on_readable`` does."""

    @property
    def unstamped_reads(self) -> int:
        """Reads delivered with their user-space stamp alone."""

    @property
    def fd(self) -> int:
        """The socket read; -1 once closed."""

    def __init__(
        self,
        fd: int,
        deliver: Callable[[bytes, int, int | None], object],
        on_eof: Callable[[], object],
        on_error: Callable[[OSError], object],
        clock: ClockOffset,
        read_bytes: int,
    ) -> None: ...
    def __call__(self) -> None: ...
    def close(self) -> None:
        """Stop for good: later calls return at once and the callables are released."""
