"""User-facing errors.

Every error a user can cause (missing data, bad config, checksum mismatch, incompatible
checkpoint, malformed records) is raised as :class:`GenfeatError` with the cause and the fix.
The CLI prints ``error: <cause>. fix: <fix>`` on one line and exits non-zero; ``--debug`` shows
the traceback.
"""


class GenfeatError(Exception):
    """An error with a cause the user can act on.

    Args:
        cause: what is wrong, naming the file, field or value.
        fix: what the user should do about it.
    """

    def __init__(self, cause: str, fix: str = ""):
        self.cause = cause
        self.fix = fix
        super().__init__(self._line())

    def _line(self) -> str:
        """``cause. fix: fix``, what the CLI prints after ``error:``."""
        return f"{self.cause}. fix: {self.fix}" if self.fix else self.cause

    def locate(self, where: str) -> None:
        """Put ``where`` the error arose (``recipe 'r.yaml'``) before its cause, in place, so that the error re-raised
        keeps its class, fields and fix: ``where: cause. fix: fix``."""
        self.cause = f"{where}: {self.cause}"
        self.args = (self._line(),)


class ConfigError(GenfeatError):
    """A config field that does not exist, has the wrong type or an invalid value."""


class DataError(GenfeatError):
    """Missing, corrupt or malformed data."""


class CheckpointError(GenfeatError):
    """A checkpoint that is missing, broken or of another architecture or vocabulary."""


class DivergenceError(ConfigError):
    """Training diverged: a loss became NaN or infinite (a setting let it, the learning rate most often)."""


_AN_BEFORE = ("a", "e", "i", "o", "xl", "lstm")
"""How the names that take "an" begin: a vowel, or a letter said with one where the name is read out letter by
letter (XL, LSTM)."""


def with_article(name: str) -> str:
    """``name`` (an architecture's or a method's, as messages write it) after the indefinite article it is said
    with: "an xlnet", "an elmo", "an lstm_lm", "a gpt", "a transformer_xl"."""
    return f"{'an' if name.lower().startswith(_AN_BEFORE) else 'a'} {name}"
