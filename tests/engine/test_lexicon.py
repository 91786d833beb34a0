"""Pronunciation dictionaries: engine.lexicon files and a request's custom_dictionary
(Riva's format), whole words in any case, errors that name the line, reload in place,
and an entry heard as its replacement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.utterance import Ask, Refused
from magpie_tts.daemon.service import Service
from magpie_tts.engine import Lexicon, LexiconError, TextPolicy, parse_custom, unknown_symbols
from magpie_tts.engine.text.lexicon import parse

from ..conftest import write_wav
from ..daemon.test_service import Registry

FILE = """# house names
Magpie  mˈæɡpaɪ
New York  nuː jˈɔːɹk
nvidia\tɛnvˈɪdiə
"""


def test_entries_replace_whole_words_in_any_case() -> None:
    lexicon = Lexicon(parse(FILE.splitlines()))
    assert len(lexicon) == 3
    said = lexicon.apply("MAGPIE and magpies fly to new  york, NVIDIA's too.")
    assert said.split() == [
        *("[[", "mˈæɡpaɪ", "]]", "and", "magpies", "fly", "to"),
        *("[[", "nuː", "jˈɔːɹk", "]]", ",", "NVIDIA's", "too."),
    ]
    assert lexicon.apply("[[ magpie ]] magpie").count("mˈæɡpaɪ") == 1  # blocks stay


def test_bad_lines_and_unknown_phonemes_are_named(voice) -> None:
    with pytest.raises(LexiconError, match="line 2: expected 'word  IPA'"):
        parse(["ok  ˈoʊkeɪ", "single spaced word"])
    with pytest.raises(LexiconError, match=r"custom_dictionary entry 2: '☃' \(U\+2603\)"):
        unknown_symbols(parse_custom("tomato  təmˈɑːtoʊ,snow  ☃a"), voice.phoneme_id_map)
    unknown_symbols(parse(FILE.splitlines()), voice.phoneme_id_map)  # the voice says these


def test_a_request_dictionary_is_over_the_lexicon_and_only_its_own() -> None:
    policy = TextPolicy(lexicon=Lexicon(parse(["data  dˈeɪɾə"])))
    assert policy.units("The data is here.") == ["The [[ dˈeɪɾə ]] is here."]
    mine = policy.units("The data is here.", "data  dˈɑːɾə,here  hˈiːɹ")
    assert mine == ["The [[ dˈɑːɾə ]] is [[ hˈiːɹ ]] ."]
    assert policy.units("The data is here.") == ["The [[ dˈeɪɾə ]] is here."]
    ssml = policy.units("<speak>The <prosody rate='90%'>data</prosody> is here.</speak>")
    assert "[[ dˈeɪɾə ]]" in " ".join(ssml)


def test_the_service_reloads_the_file_and_keeps_the_old_one_when_bad(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.txt"
    path.write_text("Magpie  mˈæɡpaɪ\n")
    registry = Registry()
    registry.default = type("Synth", (), {"voice": type("V", (), {"phoneme_id_map": "mˈæɡpaɪ"})})
    service = Service(Config(engine={"lexicon": path}), registry)
    service.load()
    policy = service.core.policy
    assert policy.units("Magpie.") == ["[[ mˈæɡpaɪ ]] ."]
    path.write_text("Magpie  mˈæɡpaɪ\nowl  ☃\n")
    with pytest.raises(LexiconError, match="line 2"):
        service.reload_lexicon()
    assert policy.units("Magpie owl.") == ["[[ mˈæɡpaɪ ]] owl."]
    path.write_text("owl  aɪ\n")
    service.reload_lexicon()
    assert policy.units("Magpie owl.") == ["Magpie [[ aɪ ]] ."]
    with pytest.raises(Refused, match="custom_dictionary entry 1") as refused:
        service.core.submit(Ask(id="x", text="Hi.", custom_dictionary="Hi"))
    assert refused.value.code == "bad-dictionary"


def test_a_dictionary_entry_is_heard_as_its_replacement(synth, recognizer, tmp_path) -> None:
    policy = TextPolicy(first_clause_words=0)
    units = policy.units("Put the apples in the basket.", "apples  bənˈænəz")
    pcm = np.concatenate([chunk.pcm for chunk in synth.stream_clauses(units)])
    wav = write_wav(tmp_path / "lexicon.wav", pcm, synth.voice.sample_rate)
    score, heard = recognizer.wer(wav, "put the bananas in the basket")
    assert score <= 0.2, heard
