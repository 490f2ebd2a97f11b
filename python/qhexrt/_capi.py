"""ctypes declarations of the C API (include/qhexrt/qhexrt.h), loaded from the
libqhexrt.so.0 installed inside this package (or $QHEXRT_LIBRARY).

Internal: the public interface is the `qhexrt` module."""

from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint64, c_void_p)
from pathlib import Path

# The C API version this module is written against (QHX_API_VERSION): 3 adds
# qhx_pipeline_default_sampling, which per-parameter sampling overrides need; 4 the
# speculate field (an older library would ignore it, so it is required); 5 the pipeline
# options' weights_in_memory; 6 the qhx_*_init_sized functions, which fill exactly the
# struct size they are given (the plain qhx_*_init fill the whole struct the library knew
# at version 5, more than a shorter struct holds).
API_VERSION = 6

QHX_OK = 0
QHX_ERR = -1
QHX_ERR_BUFFER_TOO_SMALL = -2
QHX_ERR_ARGUMENT = -3
QHX_PART_TEXT = 0
QHX_PART_IMAGE = 1


class PipelineOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("image_cache_mb", c_int64), ("want_images", c_int),
                ("threads", c_int32), ("weights_in_memory", c_int32)]


# int (*)(const char* text, size_t len, void* user): a POINTER(c_char), not c_char_p,
# so that ctypes passes the address through (the piece is `len` bytes, not NUL-terminated).
StreamCallback = CFUNCTYPE(c_int, POINTER(c_char), c_size_t, c_void_p)


class GenerationOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("max_new_tokens", c_int64), ("use_manifest_sampling", c_int),
                ("greedy", c_int), ("temperature", c_float), ("top_k", c_int32), ("top_p", c_float),
                ("min_p", c_float), ("repetition_penalty", c_float), ("presence_penalty", c_float),
                ("seed", c_uint64), ("stop", POINTER(c_char_p)), ("n_stop", c_size_t), ("resize", c_char_p),
                ("on_text", StreamCallback), ("user", c_void_p), ("keep_step_logits", c_int),
                ("reserved_v3", c_int32), ("frequency_penalty", c_float),   # API version 3
                ("reserved_v4", c_int32), ("speculate", c_int32)]           # API version 4


class Timings(Structure):
    _fields_ = [("struct_size", c_size_t), ("load_ms", c_double), ("vision_ms", c_double),
                ("image_tokens", c_int64), ("images_encoded", c_int64), ("image_cache_hits", c_int64),
                ("prefill_ms", c_double), ("ttft_ms", c_double), ("decode_ms_per_token", c_double),
                ("decode_steps", c_int64)]


class ImageCacheStats(Structure):
    _fields_ = [("struct_size", c_size_t), ("hits", c_int64), ("misses", c_int64), ("entries", c_int64),
                ("bytes", c_int64), ("capacity_bytes", c_int64)]


_P = c_void_p  # every handle is opaque

# name: (restype, argtypes)
_PROTOTYPES = {
    "qhx_version": (c_char_p, []),
    "qhx_api_version": (c_int, []),
    "qhx_last_error": (c_char_p, []),
    "qhx_pipeline_options_init": (c_int, [POINTER(PipelineOptions)]),
    "qhx_pipeline_options_init_sized": (c_int, [POINTER(PipelineOptions), c_size_t]),
    "qhx_pipeline_open2": (c_int, [c_char_p, POINTER(PipelineOptions), POINTER(_P)]),
    "qhx_pipeline_free": (None, [_P]),
    "qhx_pipeline_warning": (c_int, [_P, POINTER(c_char_p)]),
    "qhx_pipeline_takes_images": (c_int, [_P, POINTER(c_int)]),
    "qhx_image_cache_stats_init": (c_int, [POINTER(ImageCacheStats)]),
    "qhx_image_cache_stats_init_sized": (c_int, [POINTER(ImageCacheStats), c_size_t]),
    "qhx_pipeline_image_cache_stats": (c_int, [_P, POINTER(ImageCacheStats)]),
    "qhx_pipeline_default_sampling": (c_int, [_P, POINTER(GenerationOptions)]),
    "qhx_message_new": (c_int, [c_char_p, POINTER(_P)]),
    "qhx_message_free": (None, [_P]),
    "qhx_message_add_text": (c_int, [_P, c_char_p, c_size_t]),
    "qhx_message_add_image_file": (c_int, [_P, c_char_p]),
    "qhx_message_add_image_bytes": (c_int, [_P, c_char_p, c_size_t]),
    "qhx_message_role": (c_int, [_P, POINTER(c_char_p)]),
    "qhx_message_part_count": (c_int, [_P, POINTER(c_size_t)]),
    "qhx_message_part": (c_int, [_P, c_size_t, POINTER(c_int), POINTER(POINTER(c_char)), POINTER(c_size_t)]),
    "qhx_generation_options_init": (c_int, [POINTER(GenerationOptions)]),
    "qhx_generation_options_init_sized": (c_int, [POINTER(GenerationOptions), c_size_t]),
    "qhx_timings_init": (c_int, [POINTER(Timings)]),
    "qhx_timings_init_sized": (c_int, [POINTER(Timings), c_size_t]),
    "qhx_result_free": (None, [_P]),
    "qhx_result_text": (c_int, [_P, POINTER(POINTER(c_char)), POINTER(c_size_t)]),
    "qhx_result_reasoning": (c_int, [_P, POINTER(POINTER(c_char)), POINTER(c_size_t)]),
    "qhx_result_stop_reason": (c_int, [_P, POINTER(c_char_p)]),
    "qhx_result_tokens": (c_int, [_P, POINTER(POINTER(c_int32)), POINTER(c_size_t)]),
    "qhx_result_prompt_token_count": (c_int, [_P, POINTER(c_size_t)]),
    "qhx_result_cached_tokens": (c_int, [_P, POINTER(c_size_t)]),
    "qhx_result_timings": (c_int, [_P, POINTER(Timings)]),
    "qhx_session_new": (c_int, [_P, POINTER(_P)]),
    "qhx_session_free": (None, [_P]),
    "qhx_session_reset": (c_int, [_P]),
    "qhx_session_cached_tokens": (c_int, [_P, POINTER(c_size_t)]),
    "qhx_session_message_count": (c_int, [_P, POINTER(c_size_t)]),
    "qhx_session_copy_message": (c_int, [_P, c_size_t, POINTER(_P)]),
    "qhx_session_send": (c_int, [_P, _P, POINTER(GenerationOptions), POINTER(_P)]),
    "qhx_session_respond": (c_int, [_P, POINTER(_P), c_size_t, POINTER(GenerationOptions), POINTER(_P)]),
}


def library_path() -> Path:
    """$QHEXRT_LIBRARY if set, else the libqhexrt.so.0 beside this file."""
    env = os.environ.get("QHEXRT_LIBRARY")
    return Path(env) if env else Path(__file__).resolve().parent / "libqhexrt.so.0"


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise ImportError(f"qhexrt: cannot load the runtime library {path}: {e}") from e
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise ImportError(f"qhexrt: {path} has no {name} (a library older than C API version "
                              f"{API_VERSION}?)") from e
        fn.restype = restype
        fn.argtypes = argtypes
    have = lib.qhx_api_version()
    if have < API_VERSION:
        raise ImportError(f"qhexrt: {path} implements C API version {have}, this package needs {API_VERSION}")
    return lib


lib = _load()


def string_at(ptr, n: int) -> str:
    return ctypes.string_at(ptr, n).decode("utf-8", errors="replace") if n else ""
