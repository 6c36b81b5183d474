"""Types of the compiled template fit (``_templatefit.c``); built where a C compiler was at hand, absent otherwise."""

def texts(values: list[str], pieces: tuple[str, ...], kinds: bytes, text_hole: int, /) -> list[str] | None:
    """Each value's text when every one fits the template exactly (stricter than ``EventTemplate.texts``), else
    None."""
