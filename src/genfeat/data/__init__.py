"""Datasets (declared once in :mod:`.registry`), LM corpora, vocabularies and LM batching."""

from .corpora import CORPORA, Corpus, load_corpus, load_split
from .lm import LMBatch, LMOrderedStream, LMShuffledStream, iter_lm_segments
from .registry import DatasetSpec, FileSpec, data_root, datasets, get_dataset, register, resolve
from .vocab import BPEVocab, ByteVocab, SentencePieceVocab, SymbolVocab, Vocab, VocabConfig, load_vocab

__all__ = [
    "CORPORA", "Corpus", "load_corpus", "load_split",
    "LMBatch", "LMOrderedStream", "LMShuffledStream", "iter_lm_segments",
    "DatasetSpec", "FileSpec", "data_root", "datasets", "get_dataset", "register", "resolve",
    "BPEVocab", "ByteVocab", "SentencePieceVocab", "SymbolVocab", "Vocab", "VocabConfig", "load_vocab",
]
