"""The worker process of the time-limited accountants, run as
``python -m fedxab.privacy.accountant_worker`` (:mod:`fedxab.privacy.accountants`).

It reads jobs from its standard input and writes the answers to its standard output, each a
frame: a 4-byte big-endian length, then a pickle. A job is ``(compute, args)`` (``compute`` a
module-level function, pickled by name and imported here); its answer is ``(True,
compute(*args))`` or ``(False, the exception it raised)``. It returns at the end of its input
(the parent closed the pipe, stopped or died). Started as a module of its own, never by
``multiprocessing``: nothing of the parent's program (its ``__main__``: a script, ``python -``,
``python -c``, a notebook) is imported or run again here. Only the parent, which started it
with its own interpreter, writes to it: the pickles come from no one else.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import IO

__all__ = ["read_frame", "write_frame"]

_LENGTH = struct.Struct(">I")


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's bytes, or None at the end of ``stream``."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def main() -> None:
    """Serve jobs until the end of the input. Ctrl-C is the parent's to handle; what the
    computations print goes to standard error, so that standard output carries answers only."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    jobs = sys.stdin.buffer
    while (frame := read_frame(jobs)) is not None:
        compute, args = pickle.loads(frame)
        try:
            answer = (True, compute(*args))
        except Exception as exc:  # raised again in the parent
            answer = (False, exc)
        write_frame(answers, pickle.dumps(answer))


if __name__ == "__main__":
    main()
