"""Shared helpers of the reference harness: paths, hashing, stamps, locking, and the
non-weight checkpoint files (tokenizer, generation config, processor configs).

Nothing here imports torch or transformers, so cached runs stay fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from chat_template import QWEN3VL_CHAT_TEMPLATE

# Everything here works from local directories; never let transformers reach for the hub.
# (Set at import, before any transformers import reads it.)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STAMP_FILE = "qhx_stamp.json"

# spec §1.6 (hub key order; with 4-space indent the hub file is 269 bytes).
GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "top_k": 20,
    "top_p": 0.8,
    "repetition_penalty": 1.0,
    "temperature": 0.7,
    "transformers_version": "4.57.0.dev0",
}
EOS_TOKEN_IDS: list[int] = [151645, 151643]

# spec §1.7, with two deliberate differences from the hub file:
# - image_processor_type is Qwen2VLImageProcessor (the slow PIL processor) instead of the hub's
#   Qwen2VLImageProcessorFast: torchvision is not installed in the reference venv and the Fast
#   class refuses to load without it. Same resize and constants; normalization rounding
#   differs (spec §3.4).
# - min_pixels/max_pixels are added. transformers 4.57.6's slow Qwen2VLImageProcessor.__init__
#   discards a valid `size` (its `else:` branch resets it to the Qwen2-VL defaults 3136 /
#   1003520) unless min_pixels/max_pixels are given; with them it uses 65536 / 16777216 as the
#   hub's Fast processor does with `size` alone.
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "min_pixels": 65536,
    "max_pixels": 16777216,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessor",
}
# The tf5 checkpoints (built by transformers 5.x) carry the hub's layout instead: `size` alone
# (5.x's processors honour it, so no min_pixels/max_pixels), and the PIL backend's 5.x class name
# (5.x renamed them: Qwen2VLImageProcessor is the torchvision backend, ...Pil the PIL one).
PREPROCESSOR_CONFIG_TF5: dict[str, Any] = {
    **{k: v for k, v in PREPROCESSOR_CONFIG.items() if k not in ("min_pixels", "max_pixels")},
    "image_processor_type": "Qwen2VLImageProcessorPil",
}
VIDEO_PREPROCESSOR_CONFIG: dict[str, Any] = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
    "video_processor_type": "Qwen3VLVideoProcessor",
}


def cache_root(cache: str | os.PathLike[str] | None = None) -> Path:
    if cache is not None:
        return Path(cache)
    return Path(os.environ.get("QHX_CACHE", str(Path.home() / ".cache" / "qhexrt")))


def tokenizer_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """Directory with the real Qwen3 tokenizer.json and tokenizer_config.json:
    dirname($QHX_TOKENIZER_JSON) if set, else <cache>/tokenizer if it holds tokenizer.json,
    else $QHX_CACHE/tokenizer (so --cache can point at a fresh directory)."""
    env = os.environ.get("QHX_TOKENIZER_JSON")
    if env:
        return Path(env).parent
    candidate = cache_root(cache) / "tokenizer"
    if (candidate / "tokenizer.json").is_file():
        return candidate
    return cache_root(None) / "tokenizer"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def source_digest(*names: str) -> str:
    """sha256 over harness source files (next to this one), so that any edit to the scripts
    invalidates the cached outputs they produced, not only a SCRIPT_VERSION bump."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for n in names:
        h.update(n.encode() + b"\0" + (here / n).read_bytes() + b"\0")
    return h.hexdigest()


def package_versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def installed_transformers_major() -> int:
    """The major version of the transformers this interpreter has (0 when absent), read from
    the package metadata, so nothing heavy is imported."""
    try:
        return int(metadata.version("transformers").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


def python_for_major(major: int) -> Path:
    """The interpreter of the venv that holds transformers `major`: 4 -> $QHX_PY (default
    <repo>/.venv/bin/python), 5 -> $QHX_PY_TF5 (default $QHX_VENV_TF5/bin/python, itself
    defaulting to <repo>/.venv-tf5; scripts/env.sh)."""
    repo = Path(__file__).resolve().parents[2]
    if major == 5:
        if os.environ.get("QHX_PY_TF5"):
            return Path(os.environ["QHX_PY_TF5"])
        return Path(os.environ.get("QHX_VENV_TF5", str(repo / ".venv-tf5"))) / "bin" / "python"
    if os.environ.get("QHX_PY"):
        return Path(os.environ["QHX_PY"])
    return Path(os.environ.get("QHX_VENV", str(repo / ".venv"))) / "bin" / "python"


def read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        with open(directory / STAMP_FILE, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: Path, obj: Any, indent: int = 2, final_newline: bool = True) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        if final_newline:
            f.write("\n")


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so concurrent builders (pytest + build_all) do not race."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def replace_dir(tmp: Path, final: Path) -> None:
    """Moves the finished `tmp` into place as `final` (removing a stale `final`)."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def write_tokenizer_and_processor_files(out_dir: Path, tok_dir: Path, tf5: bool = False) -> None:
    """tokenizer.json (copied), tokenizer_config.json (the real one with the Qwen3-VL chat
    template substituted), chat_template.json, generation_config.json, preprocessor_config.json
    (PREPROCESSOR_CONFIG_TF5 when tf5) and video_preprocessor_config.json: the hub file set
    minus vocab.json/merges.txt."""
    src_json = tok_dir / "tokenizer.json"
    src_cfg = tok_dir / "tokenizer_config.json"
    if not src_json.is_file() or not src_cfg.is_file():
        raise FileNotFoundError(
            f"{tok_dir} lacks tokenizer.json/tokenizer_config.json: run scripts/fetch_tokenizer.sh")
    shutil.copyfile(src_json, out_dir / "tokenizer.json")
    with open(src_cfg, encoding="utf-8") as f:
        tok_cfg = json.load(f)
    tok_cfg["chat_template"] = QWEN3VL_CHAT_TEMPLATE
    tok_cfg["processor_class"] = "Qwen3VLProcessor"
    write_json(out_dir / "tokenizer_config.json", tok_cfg)
    write_json(out_dir / "chat_template.json", {"chat_template": QWEN3VL_CHAT_TEMPLATE})
    # 4-space indent, no final newline: the hub files' layout (spec §1.6/§1.7 byte sizes).
    write_json(out_dir / "generation_config.json", GENERATION_CONFIG, indent=4, final_newline=False)
    write_json(out_dir / "preprocessor_config.json",
               PREPROCESSOR_CONFIG_TF5 if tf5 else PREPROCESSOR_CONFIG, indent=4,
               final_newline=False)
    write_json(out_dir / "video_preprocessor_config.json", VIDEO_PREPROCESSOR_CONFIG, indent=4,
               final_newline=False)


def is_norm_weight(name: str) -> bool:
    """Every LayerNorm/RMSNorm weight (incl. q_norm/k_norm and the merger norms)."""
    return name.endswith(".weight") and "norm" in name.rsplit(".", 2)[-2]
