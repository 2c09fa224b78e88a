"""Speech clips for the voice-activity model, made on the spot with Debian's espeak-ng and sox.

    from speech_audio import speech_clips
    clips = speech_clips(folder, count=6, seed=0)      # list of float32 arrays, 16 kHz mono, [-1, 1]

Each clip: a sentence spoken by espeak-ng (voice and rate vary with the clip), resampled to 16 kHz,
padded with silence before and after (so it has frames without speech), and mixed by sox with
pink or white noise at a level that varies with the clip. Nothing is stored beyond ``folder``.
"""
from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

RATE = 16000
FRAME, CONTEXT = 512, 64   # silero VAD at 16 kHz: 512 new samples per call, after the 64 before them
VOICES = ("en-us", "en-gb+f3", "de+m3", "fr+f2", "en-us+m7", "es+f4")
SPEEDS = (120, 165, 210)
SENTENCES = (
    "The next train to the airport leaves from platform four in ten minutes.",
    "Please keep your ticket until the end of the journey.",
    "Quantized models should sound the alarm only when someone is speaking.",
    "Seven hundred and twenty three parcels arrived this morning.",
    "Turn left at the second crossing and follow the river.",
    "Das Wetter bleibt morgen trocken und etwas kühler.",
)


def tools_missing() -> list[str]:
    """The command-line tools ``speech_clips`` needs that are not installed."""
    return [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


def speech_clips(folder: Path, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` noisy speech clips (float32, 16 kHz mono); clip ``k`` uses voice/rate/sentence/noise by
    ``seed + k``, so two seeds give disjoint sets when their ranges do not overlap."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for k in range(seed, seed + count):
        rng = np.random.default_rng(k)
        spoken, speech, noise, mixed = (folder / f"{stem}{k}.wav" for stem in ("spoken", "speech", "noise", "mixed"))
        _run("espeak-ng", "-v", VOICES[k % len(VOICES)], "-s", str(SPEEDS[k % len(SPEEDS)]), "-w", str(spoken),
             SENTENCES[k % len(SENTENCES)])
        before, after = rng.uniform(0.3, 1.0, 2)
        _run("sox", str(spoken), "-r", str(RATE), "-c", "1", "-b", "16", str(speech), "pad", f"{before:.2f}", f"{after:.2f}")
        seconds = _frames(speech) / RATE
        colour = ("pinknoise", "whitenoise", "brownnoise")[k % 3]
        _run("sox", "-n", "-r", str(RATE), "-c", "1", "-b", "16", str(noise), "synth", f"{seconds:.3f}", colour,
             "vol", f"{rng.uniform(0.01, 0.08):.3f}")
        _run("sox", "-m", str(speech), str(noise), str(mixed))
        clips.append(_read(mixed))
    return clips


def _frames(path: Path) -> int:
    with wave.open(str(path)) as f:
        return f.getnframes()


def _read(path: Path) -> np.ndarray:
    with wave.open(str(path)) as f:
        data = np.frombuffer(f.readframes(f.getnframes()), np.int16)
    return (data.astype(np.float32) / 32768.0)


def vad_frames(clip: np.ndarray):
    """The VAD model's inputs for ``clip``: [1, 576] rows (64 samples of context + 512 new ones)."""
    padded = np.concatenate([np.zeros(CONTEXT, np.float32), clip])
    for start in range(0, len(padded) - FRAME - CONTEXT + 1, FRAME):
        yield padded[None, start:start + FRAME + CONTEXT]


def run_vad(step, clip: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Speech probability per frame with the recurrent state carried frame to frame, and the
    (frame, state) pairs fed. ``step(frame, state) -> (probability, new state)``."""
    state, probs, pairs = np.zeros((2, 1, 128), np.float32), [], []
    for frame in vad_frames(clip):
        pairs.append((frame, state))
        prob, state = step(frame, state)
        probs.append(float(np.ravel(prob)[0]))
    return np.array(probs), pairs


def write_vad_dataset(folder: Path, pairs: list[tuple[np.ndarray, np.ndarray]], count: int, seed: int = 0) -> Path:
    """A dataset file of ``count`` (frame, state) pairs drawn from ``pairs``, with its .npy files."""
    lines = []
    for j, index in enumerate(np.random.default_rng(seed).choice(len(pairs), min(count, len(pairs)), replace=False)):
        frame, state = pairs[index]
        np.save(folder / f"vad_f{j}.npy", frame)
        np.save(folder / f"vad_s{j}.npy", state)
        lines.append(f"vad_f{j}.npy vad_s{j}.npy")
    (folder / "vad_dataset.txt").write_text("\n".join(lines) + "\n")
    return folder / "vad_dataset.txt"
