"""The append-only journal: checksummed records in preallocated segment files.

See :mod:`.records` for the on-disk format, :mod:`.writer` for group commit,
:mod:`.recovery` for load and damage handling, :mod:`.compact` for compaction.
"""

from .errors import DamagedJournal, JournalError
from .journal import FileJournal
from .records import CorruptRecord, Record, RecordType, TornRecord, decode, encode
from .recovery import LoadedJournal, LoadedRecord, read_segments
from .segment import SegmentInfo

__all__ = [
    "CorruptRecord",
    "DamagedJournal",
    "FileJournal",
    "JournalError",
    "LoadedJournal",
    "LoadedRecord",
    "Record",
    "RecordType",
    "SegmentInfo",
    "TornRecord",
    "decode",
    "encode",
    "read_segments",
]
