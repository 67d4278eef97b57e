"""The base of the library's categorical choices: string enums converted once at the door.

Users spell a choice as a string (``norm="post"``, ``--norm post``); the library converts it
once, where it enters (:class:`~remprop.theory.Architecture`, a component's constructor), into a
member of the choice's enum, and from then on *asks the member* (``arch.norm.normalises_stream``)
instead of comparing strings. Each enum lives in the module of the component that owns the
choice (the block assembly owns the norm placement, attention its variant, ...), so a choice's
meaning is written once.

The members are ``str`` subclasses equal to their public spelling (``NormPlacement.POST ==
"post"``), print and serialise as that spelling (JSON, ``repr``, f-strings), so results and
saved files keep the strings users know.
"""
from __future__ import annotations

import enum

from .checks import ParameterError

__all__ = ["Choice"]


class Choice(str, enum.Enum):
    """A categorical choice whose members are their public spelling (a ``str``)."""

    def __str__(self):
        return self.value

    def __repr__(self):
        return repr(self.value)

    def __format__(self, spec):
        return format(self.value, spec)

    @classmethod
    def spellings(cls) -> tuple:
        """The public spellings, in definition order (the CLI's ``choices``)."""
        return tuple(member.value for member in cls)

    @classmethod
    def parse(cls, name, value):
        """The member spelled ``value``; a ValueError naming ``name`` and the spellings otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except (ValueError, TypeError):
            options = ", ".join(repr(spelling) for spelling in cls.spellings())
            raise ParameterError(name, f"{name} must be one of {options}, got {value!r}") from None
