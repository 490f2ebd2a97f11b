"""QHexRT from Python: a Qwen3-VL run plan (a manifest, a bundle folder or a Hugging Face
checkpoint directory) and chat sessions on it, over the runtime's C API (ctypes).

    import qhexrt
    pipe = qhexrt.Pipeline("/models/qwen3vl-w8")     # a bundle folder (its image manifest)
    chat = pipe.session()
    r = chat.send("What is in this picture?", images=["cat.png"], max_tokens=64)
    print(r.text, r.stop_reason, r.timings.ttft_ms)
    for piece in chat.send("And its colour?", stream=True):   # only this turn is prefilled
        print(piece, end="", flush=True)

Images are a path (str or os.PathLike), the bytes of an encoded file (JPEG, PNG, WebP,
PPM), a PIL image, or a uint8 numpy array (H x W, H x W x 1, H x W x 3 or H x W x 4).
Every failure of the runtime raises qhexrt.Error with its message.
"""

from __future__ import annotations

import ctypes
import io
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Literal, Optional, Sequence, Union, overload

from . import _capi
from ._capi import lib

__all__ = ["Error", "Pipeline", "Session", "Stream", "Result", "Timings", "Message", "ImageCacheStats",
           "version", "api_version"]

__version__ = "0.1.0"

ImageInput = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]  # Any: a PIL image, a numpy array


class Error(RuntimeError):
    """A failure reported by the runtime: str(error) is its message (qhx_last_error());
    `status` the C API's status code (-1 an error, -3 a bad argument)."""

    def __init__(self, message: str, status: int = _capi.QHX_ERR) -> None:
        super().__init__(message)
        self.status = status


def _check(status: int) -> None:
    """Raises Error for a failing status, with this thread's last error."""
    if status != _capi.QHX_OK:
        raise Error(lib.qhx_last_error().decode("utf-8", errors="replace"), status)


def version() -> str:
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return lib.qhx_version().decode()


def api_version() -> int:
    """The C API version the loaded library implements."""
    return int(lib.qhx_api_version())


@dataclass(frozen=True)
class Timings:
    """Timings of one answer, in milliseconds (see qhx_timings in qhexrt.h)."""
    load_ms: float = 0.0
    vision_ms: float = 0.0
    image_tokens: int = 0
    images_encoded: int = 0
    image_cache_hits: int = 0
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    decode_ms_per_token: float = 0.0
    decode_steps: int = 0


@dataclass(frozen=True)
class Result:
    """One answer. `tokens` are the generated ids (with a final stop token if one ended the
    answer); `prompt_tokens` the prompt's length after the chat template, `cached_tokens`
    how many of them came from the session's KV cache."""
    text: str
    tokens: List[int]
    prompt_tokens: int
    cached_tokens: int
    stop_reason: str  # "stop_token", "stop_string", "max_new_tokens" or "cancelled"
    reasoning: str = ""  # a Thinking model's <think> part
    timings: Timings = field(default_factory=Timings)


@dataclass(frozen=True)
class Message:
    """A turn of a conversation. `content` is in the Hugging Face form: a list of
    {"type": "text", "text": ...} and {"type": "image", "image": NAME} (the image's path,
    or "image in memory")."""
    role: str
    content: List[dict]

    @property
    def text(self) -> str:
        return "".join(p["text"] for p in self.content if p["type"] == "text")


@dataclass(frozen=True)
class ImageCacheStats:
    hits: int
    misses: int
    entries: int
    bytes: int
    capacity_bytes: int


# ---- images -----------------------------------------------------------------------------

def _ppm(array: Any) -> bytes:
    """A uint8 H x W (x 1 | 3) array as a binary PGM/PPM file (lossless; no Pillow needed)."""
    channels = 1 if array.ndim == 2 else array.shape[2]
    h, w = array.shape[0], array.shape[1]
    magic = b"P5" if channels == 1 else b"P6"
    return magic + b"\n%d %d\n255\n" % (w, h) + array.tobytes(order="C")


def _png_from_pil(image: Any) -> bytes:
    if image.mode not in ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"):
        image = image.convert("RGB")  # e.g. CMYK, YCbCr: modes PNG cannot hold
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _is_pil_image(x: Any) -> bool:
    mod = type(x).__module__
    if not mod.startswith("PIL."):
        return False
    from PIL import Image  # imported only when a PIL object is passed
    return isinstance(x, Image.Image)


def _is_ndarray(x: Any) -> bool:
    return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"


def _image_bytes(image: Any) -> Optional[bytes]:
    """The encoded bytes of an in-memory image, or None for a path."""
    if isinstance(image, (str, os.PathLike)):
        return None
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if _is_pil_image(image):
        return _png_from_pil(image)
    if _is_ndarray(image):
        import numpy as np
        a = image
        if a.dtype != np.uint8:
            raise TypeError(f"qhexrt: a numpy image must be uint8 (H x W x C), got dtype {a.dtype}")
        if a.ndim == 3 and a.shape[2] == 1:
            a = a[:, :, 0]
        if a.ndim == 2 or (a.ndim == 3 and a.shape[2] == 3):
            if a.shape[0] == 0 or a.shape[1] == 0:
                raise TypeError(f"qhexrt: an empty numpy image (shape {a.shape})")
            return _ppm(np.ascontiguousarray(a))
        if a.ndim == 3 and a.shape[2] == 4:
            from PIL import Image  # RGBA goes through Pillow's PNG encoder
            return _png_from_pil(Image.fromarray(np.ascontiguousarray(a), "RGBA"))
        raise TypeError(f"qhexrt: a numpy image is H x W or H x W x 1/3/4, got shape {a.shape}")
    raise TypeError(f"qhexrt: an image is a path, encoded bytes, a PIL image or a numpy array, "
                    f"not {type(image).__name__}")


class _CMessage:
    """An owned qhx_message handle."""

    def __init__(self, role: str, text: str = "", images: Sequence[ImageInput] = ()) -> None:
        self.handle = ctypes.c_void_p()
        _check(lib.qhx_message_new(role.encode(), ctypes.byref(self.handle)))
        for image in images:  # images first, then the text (as the Qwen chat template expects)
            data = _image_bytes(image)
            if data is None:
                _check(lib.qhx_message_add_image_file(self.handle, os.fsencode(image)))
            else:
                if not data:
                    raise Error("qhexrt: an image given as bytes is empty", _capi.QHX_ERR_ARGUMENT)
                _check(lib.qhx_message_add_image_bytes(self.handle, data, len(data)))
        if text or not images:
            t = text.encode("utf-8")
            _check(lib.qhx_message_add_text(self.handle, t, len(t)))

    def __del__(self) -> None:
        if getattr(self, "handle", None) is not None and lib is not None:
            lib.qhx_message_free(self.handle)
            self.handle = None


def _message_from_handle(handle: ctypes.c_void_p) -> Message:
    role = ctypes.c_char_p()
    _check(lib.qhx_message_role(handle, ctypes.byref(role)))
    n = ctypes.c_size_t()
    _check(lib.qhx_message_part_count(handle, ctypes.byref(n)))
    parts: List[dict] = []
    for i in range(n.value):
        kind = ctypes.c_int()
        text = ctypes.POINTER(ctypes.c_char)()
        length = ctypes.c_size_t()
        _check(lib.qhx_message_part(handle, i, ctypes.byref(kind), ctypes.byref(text), ctypes.byref(length)))
        s = _capi.string_at(text, length.value)
        parts.append({"type": "text", "text": s} if kind.value == _capi.QHX_PART_TEXT
                     else {"type": "image", "image": s})
    return Message(role.value.decode(), parts)


# ---- results ----------------------------------------------------------------------------

def _result_from_handle(handle: ctypes.c_void_p) -> Result:
    try:
        text = ctypes.POINTER(ctypes.c_char)()
        n = ctypes.c_size_t()
        _check(lib.qhx_result_text(handle, ctypes.byref(text), ctypes.byref(n)))
        answer = _capi.string_at(text, n.value)
        _check(lib.qhx_result_reasoning(handle, ctypes.byref(text), ctypes.byref(n)))
        reasoning = _capi.string_at(text, n.value)
        reason = ctypes.c_char_p()
        _check(lib.qhx_result_stop_reason(handle, ctypes.byref(reason)))
        ids = ctypes.POINTER(ctypes.c_int32)()
        _check(lib.qhx_result_tokens(handle, ctypes.byref(ids), ctypes.byref(n)))
        tokens = [int(ids[i]) for i in range(n.value)]
        _check(lib.qhx_result_prompt_token_count(handle, ctypes.byref(n)))
        prompt = int(n.value)
        _check(lib.qhx_result_cached_tokens(handle, ctypes.byref(n)))
        cached = int(n.value)
        t = _capi.Timings()
        _check(lib.qhx_timings_init_sized(ctypes.byref(t), ctypes.sizeof(t)))
        _check(lib.qhx_result_timings(handle, ctypes.byref(t)))
        timings = Timings(**{name: getattr(t, name) for name, _ in _capi.Timings._fields_[1:]})
        return Result(text=answer, tokens=tokens, prompt_tokens=prompt, cached_tokens=cached,
                      stop_reason=reason.value.decode(), reasoning=reasoning, timings=timings)
    finally:
        lib.qhx_result_free(handle)


# ---- pipelines and sessions -------------------------------------------------------------

class Pipeline:
    """A loaded run plan: `path` is a manifest (.json), a bundle folder or a Hugging Face
    checkpoint directory (the default f32 CPU plan).

    image_cache_mb bounds the image-feature cache (None: the manifest's; 0: off).
    want_images, for a bundle folder: True its manifest with image stages, False its text-only
    one, None (default) the image one if it has one, else the text one (a manifest file or a
    checkpoint directory is what it is). threads sets the CPU kernels' worker threads for the
    process (None leaves them). weights_in_memory reads the weights decode streams into memory
    at open instead of mapping them (slower open, faster decode; docs/bundle.md, "Mapped files").
    Raises Error when the plan cannot be opened."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], image_cache_mb: Optional[int] = None,
                 want_images: Optional[bool] = None, threads: Optional[int] = None,
                 weights_in_memory: bool = False) -> None:
        self._weights_in_memory = bool(weights_in_memory)
        if want_images is None:
            try:
                self._open(path, image_cache_mb, True, threads)
            except Error as e:
                if "cannot take an image" not in str(e):
                    raise
                self._open(path, image_cache_mb, False, threads)
        else:
            self._open(path, image_cache_mb, want_images, threads)
        self.path = os.fspath(path)

    def _open(self, path: Union[str, "os.PathLike[str]"], image_cache_mb: Optional[int], want_images: bool,
              threads: Optional[int]) -> None:
        self._handle = ctypes.c_void_p()
        opts = _capi.PipelineOptions()
        _check(lib.qhx_pipeline_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts)))
        opts.struct_size = ctypes.sizeof(opts)
        if image_cache_mb is not None:
            if image_cache_mb < 0:
                raise ValueError("qhexrt: image_cache_mb must be >= 0 (or None for the manifest's)")
            opts.image_cache_mb = int(image_cache_mb)
        opts.want_images = 1 if want_images else 0
        if threads is not None:
            opts.threads = int(threads)
        opts.weights_in_memory = 1 if self._weights_in_memory else 0
        _check(lib.qhx_pipeline_open2(os.fsencode(path), ctypes.byref(opts), ctypes.byref(self._handle)))

    def __del__(self) -> None:
        h = getattr(self, "_handle", None)
        if h and lib is not None:
            lib.qhx_pipeline_free(h)
            self._handle = None

    def session(self, system: Optional[str] = None) -> "Session":
        """A new conversation on this pipeline (sessions share its weights and image cache).
        `system` is a system turn before the first user turn (kept across reset())."""
        return Session(self, system)

    @property
    def warning(self) -> str:
        """The warnings of opening the pipeline ("" if none)."""
        text = ctypes.c_char_p()
        _check(lib.qhx_pipeline_warning(self._handle, ctypes.byref(text)))
        return text.value.decode("utf-8", errors="replace")

    @property
    def takes_images(self) -> bool:
        v = ctypes.c_int()
        _check(lib.qhx_pipeline_takes_images(self._handle, ctypes.byref(v)))
        return bool(v.value)

    def image_cache_stats(self) -> ImageCacheStats:
        s = _capi.ImageCacheStats()
        _check(lib.qhx_image_cache_stats_init_sized(ctypes.byref(s), ctypes.sizeof(s)))
        _check(lib.qhx_pipeline_image_cache_stats(self._handle, ctypes.byref(s)))
        return ImageCacheStats(s.hits, s.misses, s.entries, s.bytes, s.capacity_bytes)


_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
             "frequency_penalty", "seed")


class Stream(Iterator[str]):
    """The answer of Session.send(..., stream=True): iterate for the pieces of text as they are
    generated; `result` is the Result once the answer is complete. Closing the stream early
    (close(), leaving a for loop and dropping it, or Ctrl-C while waiting for a piece) cancels
    the answer: it ends with stop reason "cancelled"."""

    _DONE = object()

    def __init__(self, run: Callable[[Callable[[str], bool]], Result]) -> None:
        self._run = run
        self._queue: "queue.Queue[object]" = queue.Queue()
        self._cancel = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._done = False
        self._result: Optional[Result] = None
        self._error: Optional[BaseException] = None

    def _work(self) -> None:
        try:
            self._result = self._run(self._on_text)
        except BaseException as e:  # handed to the consuming thread
            self._error = e
        finally:
            self._queue.put(Stream._DONE)

    def _on_text(self, piece: str) -> bool:
        if self._cancel.is_set():
            return False
        self._queue.put(piece)
        return True

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> str:
        if self._done:
            raise StopIteration
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="qhexrt-answer", daemon=True)
            self._thread.start()
        try:
            item = self._queue.get()
        except BaseException:  # KeyboardInterrupt: cancel the answer, leave the session consistent
            self.close()
            raise
        if item is Stream._DONE:
            self._finish()
            raise StopIteration
        return item  # type: ignore[return-value]

    def _finish(self) -> None:
        self._done = True
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        """Cancels the answer if it is still running and waits for it to end."""
        if self._done:
            return
        self._cancel.set()
        if self._thread is None:  # never started: nothing to cancel
            self._done = True
            return
        while self._queue.get() is not Stream._DONE:
            pass
        self._finish()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def result(self) -> Result:
        """The Result; reading it before the end consumes (and drops) the remaining pieces."""
        for _ in self:
            pass
        if self._result is None:
            raise Error("qhexrt: the answer was cancelled before it started")
        return self._result


class Session:
    """A conversation on a Pipeline: its messages and the KV cache that holds them, so a
    follow-up costs only its own tokens. Used by one thread at a time."""

    def __init__(self, pipeline: Pipeline, system: Optional[str] = None) -> None:
        self.pipeline = pipeline  # kept alive (the C session would keep it anyway)
        self.system = system
        self._handle = ctypes.c_void_p()
        _check(lib.qhx_session_new(pipeline._handle, ctypes.byref(self._handle)))

    def __del__(self) -> None:
        h = getattr(self, "_handle", None)
        if h and lib is not None:
            lib.qhx_session_free(h)
            self._handle = None

    def reset(self) -> None:
        """Forgets the conversation (the system turn, if any, comes again with the next send)."""
        _check(lib.qhx_session_reset(self._handle))

    @property
    def cached_tokens(self) -> int:
        """Tokens whose keys and values the session's cache holds."""
        n = ctypes.c_size_t()
        _check(lib.qhx_session_cached_tokens(self._handle, ctypes.byref(n)))
        return int(n.value)

    @property
    def messages(self) -> List[Message]:
        """The conversation so far (answers included), as copies."""
        n = ctypes.c_size_t()
        _check(lib.qhx_session_message_count(self._handle, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            _check(lib.qhx_session_copy_message(self._handle, i, ctypes.byref(h)))
            try:
                out.append(_message_from_handle(h))
            finally:
                lib.qhx_message_free(h)
        return out

    def _options(self, max_tokens: Optional[int], stop: Sequence[str], resize: Optional[str],
                 sampling: dict, speculate: int = 0) -> tuple:
        o = _capi.GenerationOptions()
        _check(lib.qhx_generation_options_init_sized(ctypes.byref(o), ctypes.sizeof(o)))
        o.struct_size = ctypes.sizeof(o)
        if isinstance(speculate, bool) or not isinstance(speculate, int):
            raise TypeError(f"qhexrt: speculate must be an int (a draft length), got {type(speculate).__name__}")
        o.speculate = speculate  # the runtime checks the range
        if max_tokens is not None:
            if max_tokens <= 0:
                raise ValueError("qhexrt: max_tokens must be > 0 (or None for the manifest's)")
            o.max_new_tokens = int(max_tokens)
        given = {k: v for k, v in sampling.items() if v is not None}
        if given:  # the plan's parameters, with the ones given changed
            _check(lib.qhx_pipeline_default_sampling(self.pipeline._handle, ctypes.byref(o)))
            for k in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
                if k in given:
                    setattr(o, k, float(given[k]))
            if "top_k" in given:
                o.top_k = int(given["top_k"])
            if "seed" in given:
                o.seed = int(given["seed"])
            if "temperature" in given:
                o.greedy = 1 if float(given["temperature"]) == 0.0 else 0
        keep = []  # buffers the struct points into, alive for the call
        if stop:
            if isinstance(stop, str):
                stop = [stop]
            arr = (ctypes.c_char_p * len(stop))(*[s.encode("utf-8") for s in stop])
            keep.append(arr)
            o.stop = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            o.n_stop = len(stop)
        if resize is not None:
            r = resize.encode()
            keep.append(r)
            o.resize = r
        return o, keep

    @overload
    def send(self, text: str = "", images: Union[ImageInput, Sequence[ImageInput]] = (), *,
             stream: Literal[False] = False, max_tokens: Optional[int] = None, temperature: Optional[float] = None,
             top_p: Optional[float] = None, top_k: Optional[int] = None, min_p: Optional[float] = None,
             repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
             frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
             stop: Sequence[str] = (), resize: Optional[str] = None, speculate: int = 0) -> Result: ...

    @overload
    def send(self, text: str = "", images: Union[ImageInput, Sequence[ImageInput]] = (), *,
             stream: Literal[True], max_tokens: Optional[int] = None, temperature: Optional[float] = None,
             top_p: Optional[float] = None, top_k: Optional[int] = None, min_p: Optional[float] = None,
             repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
             frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
             stop: Sequence[str] = (), resize: Optional[str] = None, speculate: int = 0) -> Stream: ...

    def send(self, text: str = "", images: Union[ImageInput, Sequence[ImageInput]] = (), *, stream: bool = False,
             max_tokens: Optional[int] = None, temperature: Optional[float] = None,
             top_p: Optional[float] = None, top_k: Optional[int] = None, min_p: Optional[float] = None,
             repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
             frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
             stop: Sequence[str] = (), resize: Optional[str] = None, speculate: int = 0
             ) -> Union[Result, Stream]:
        """Appends a user turn (the images, then `text`) and answers it; the answer joins the
        conversation. Sampling parameters left as None are the plan's (temperature=0 is greedy
        decoding); max_tokens None is the manifest's. stop: strings the answer ends before.
        resize: "fixed" or "native" (None: the manifest's). speculate: up to this many n-gram
        draft tokens checked per pass (0 off, at most 16; greedy answers are unchanged by it).

        Returns a Result, or with stream=True a Stream of text pieces (its `result` after).
        Raises Error (nothing is appended to the conversation) when the runtime refuses."""
        if isinstance(images, (str, os.PathLike, bytes, bytearray, memoryview)) or _is_ndarray(images) \
                or _is_pil_image(images):
            images = [images]  # one image
        msg = _CMessage("user", text, list(images))  # type: ignore[arg-type]
        sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, seed=seed)
        opts, keep = self._options(max_tokens, stop, resize, sampling, speculate)
        first = self.system is not None and not self._message_count()
        system = _CMessage("system", self.system) if first else None

        def run(on_text: Callable[[str], bool]) -> Result:
            # Runs on the stream's thread: qhx_last_error() is per thread, so errors are read here.
            def cb(ptr, n, _user):  # noqa: ANN001
                try:
                    return 0 if on_text(_capi.string_at(ptr, n)) else 1
                except BaseException:
                    return 1
            c_cb = _capi.StreamCallback(cb)
            opts.on_text = c_cb
            out = ctypes.c_void_p()
            _ = keep, msg, system  # alive until the call returns
            if system is not None:
                arr = (ctypes.c_void_p * 2)(system.handle, msg.handle)
                status = lib.qhx_session_respond(self._handle, arr, 2, ctypes.byref(opts), ctypes.byref(out))
            else:
                status = lib.qhx_session_send(self._handle, msg.handle, ctypes.byref(opts), ctypes.byref(out))
            _check(status)
            return _result_from_handle(out)

        s = Stream(run)
        if stream:
            return s
        return s.result

    def _message_count(self) -> int:
        n = ctypes.c_size_t()
        _check(lib.qhx_session_message_count(self._handle, ctypes.byref(n)))
        return int(n.value)
