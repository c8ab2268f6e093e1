"""The embedding cache: a hit returns the miss's values, cached scores equal uncached ones, changed weights or
changed file content are misses, the memory bound holds, and the disk store survives a new process's cache."""

import stat

import pytest
import torch

from modeling_pacs import PACSModel
from modeling_pacs.models.embedding_cache import EmbeddingCache
from tests.fixtures.helpers import assert_scores_close, random_image

CAPTIONS = ["a dog on a beach", "two cats on a sofa", "a red car", "a dog on a beach"]


@pytest.fixture
def model(tiny_model_dir):
    """A private model per test: tests change its weights and attach caches."""
    return PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def test_text_hit_is_bit_identical_to_miss_and_close_to_uncached(model):
    uncached = model.encode_texts(CAPTIONS)
    model.embedding_cache = EmbeddingCache()
    first = model.encode_texts(CAPTIONS)
    assert (model.embedding_cache.hits, model.embedding_cache.misses) == (0, 3)
    second = model.encode_texts(list(reversed(CAPTIONS)))
    assert (model.embedding_cache.hits, model.embedding_cache.misses) == (4, 3)
    assert torch.equal(second, first.flip(0))
    assert torch.equal(first[0], first[3])
    assert_scores_close(first.flatten(), uncached.flatten(), what="cached vs uncached text embeddings")


def test_score_with_cache_equals_score_without(model, image_folder):
    images = [image_folder[0], image_folder[1], image_folder[0]]
    candidates = ["a dog", "a cat", "a bird"]
    references = [["a dog running", "a puppy"], ["a cat"], ["a dog running"]]
    expected = model.score(images, candidates, references)
    model.embedding_cache = EmbeddingCache()
    first = model.score(images, candidates, references)
    second = model.score(images, candidates, references)
    assert torch.equal(first.scores, second.scores) and torch.equal(first.ref_scores, second.ref_scores)
    assert_scores_close(first.scores, expected.scores)
    assert_scores_close(first.ref_scores, expected.ref_scores)
    # 2 distinct images, 5 distinct texts: all misses first, all hits second.
    assert (model.embedding_cache.misses, model.embedding_cache.hits) == (7, 7)


def test_changed_weights_invalidate_entries(model):
    model.embedding_cache = EmbeddingCache()
    before = model.encode_texts(["a dog"])
    with torch.no_grad():
        model.clip.text_projection.weight.mul_(2.0).add_(0.01)
    after = model.encode_texts(["a dog"])
    assert model.embedding_cache.hits == 0
    model.embedding_cache = None
    assert_scores_close(after.flatten(), model.encode_texts(["a dog"]).flatten())
    assert not torch.allclose(before, after)


def test_image_entries_depend_on_the_image_side_only(model, image_folder):
    """Image entries are keyed by the image tower's weights and preprocessing: a text-side change keeps them (so
    models with one image encoder share them), a vision-side change is a miss."""
    model.embedding_cache = EmbeddingCache()
    before = model.encode_images([image_folder[0]])
    with torch.no_grad():
        model.clip.text_projection.weight.mul_(2.0)
        model.clip.logit_scale.add_(1.0)
    assert torch.equal(model.encode_images([image_folder[0]]), before)
    assert (model.embedding_cache.hits, model.embedding_cache.misses) == (1, 1)
    with torch.no_grad():
        model.clip.visual_projection.weight.mul_(2.0)
    after = model.encode_images([image_folder[0]])
    assert model.embedding_cache.misses == 2
    model.embedding_cache = None
    assert_scores_close(after.flatten(), model.encode_images([image_folder[0]]).flatten())
    assert_scores_close(after.flatten(), 2.0 * before.flatten(), what="a doubled projection doubles the embedding")


def test_load_state_dict_invalidates_entries(model, tiny_model_dir):
    other = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        other.clip.text_projection.weight.neg_()
    model.embedding_cache = EmbeddingCache()
    model.encode_texts(["a dog"])
    model.load_state_dict(other.state_dict())
    reloaded = model.encode_texts(["a dog"])
    assert model.embedding_cache.hits == 0
    assert_scores_close(reloaded.flatten(), other.encode_texts(["a dog"]).flatten())


def test_memory_bound_drops_least_recently_used(model):
    cache = model.embedding_cache = EmbeddingCache(max_entries=2)
    model.encode_texts(["one", "two"])
    model.encode_texts(["one"])  # "one" is now the most recently used
    model.encode_texts(["three"])
    assert len(cache) == 2
    model.encode_texts(["one"])
    assert cache.hits == 2
    model.encode_texts(["two"])
    assert cache.misses == 4


def test_image_entries_follow_content_not_path(model, tmp_path):
    path = tmp_path / "picture.png"
    random_image(0).save(path)
    model.embedding_cache = EmbeddingCache()
    first = model.encode_images([path])
    # Equal pixels in another object, and the same bytes: hits.
    model.encode_images([random_image(0), path.read_bytes()])
    assert model.embedding_cache.hits == 1  # the PIL pixels hash differently from the PNG file's bytes
    random_image(1).save(path)
    changed = model.encode_images([path])
    assert model.embedding_cache.hits == 1
    assert not torch.allclose(first, changed)


def test_disk_store_is_reused_atomic_and_readable(tiny_model_dir, tmp_path):
    first_model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    first_model.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    stored = first_model.encode_texts(["a dog", "a cat"])
    files = sorted((tmp_path / "cache").rglob("*"))
    entry_files = [path for path in files if path.is_file()]
    assert len(entry_files) == 2
    assert not [path for path in entry_files if path.name.startswith(".tmp-")]
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o644 for path in entry_files)

    second_model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    second_model.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    loaded = second_model.encode_texts(["a cat", "a dog"])
    assert (second_model.embedding_cache.hits, second_model.embedding_cache.misses) == (2, 0)
    assert torch.equal(loaded, stored.flip(0))


def test_errors_name_the_caller_item_with_cache(model, image_folder, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    model.embedding_cache = EmbeddingCache()
    model.encode_images([image_folder[0]])
    with pytest.raises(ValueError, match=r"image 1 \('.*broken.jpg'\) could not be decoded"):
        model.score([image_folder[0], broken], ["a", "b"])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_entries_is_validated(bad):
    with pytest.raises(ValueError, match="max_entries must be a positive integer"):
        EmbeddingCache(max_entries=bad)


# ---------------------------------------------------------------------------------------------------- after failures
FAILING_CALLS = {  # a call that fails on bad input part-way through a batch (some items cached, some not)
    "undecodable image": lambda model, images, broken: model.score([images[0], images[1], broken], ["a", "b", "c"]),
    "missing image": lambda model, images, broken: model.score([images[1], "missing.png"], ["a", "b"]),
    "image of a wrong type": lambda model, images, broken: model.encode_images([images[0], 3.5]),
    "caption of a wrong type": lambda model, images, broken: model.encode_texts(["a dog", None]),
    "mismatched counts": lambda model, images, broken: model.score(images[:2], ["a"]),
}


@pytest.mark.parametrize("failure", FAILING_CALLS)
def test_a_failed_call_leaves_the_cache_as_it_was_and_the_next_call_correct(
    tiny_model_dir, image_folder, tmp_path, failure
):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    model = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    model.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    model.score([image_folder[0]], ["a dog"])  # one image and one text cached
    before = (len(model.embedding_cache), model.embedding_cache.hits, model.embedding_cache.misses)
    files = sorted((tmp_path / "cache").rglob("*"))
    with pytest.raises((ValueError, TypeError, OSError)):
        FAILING_CALLS[failure](model, image_folder, broken)
    assert (len(model.embedding_cache), model.embedding_cache.hits, model.embedding_cache.misses) == before
    assert sorted((tmp_path / "cache").rglob("*")) == files
    assert not model.embedding_cache.is_filling()

    fresh = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    images, captions = [image_folder[0], image_folder[1], image_folder[2]], ["a dog", "b", "c"]
    expected = fresh.score(images, captions, references=[["a"], ["b"], ["c"]])
    cached = model.score(images, captions, references=[["a"], ["b"], ["c"]])
    assert_scores_close(cached.scores, expected.scores)
    assert_scores_close(cached.ref_scores, expected.ref_scores)


def flip_embedding_byte(path):
    stored = torch.load(path, weights_only=True)
    stored["embedding"] = stored["embedding"].clone()
    stored["embedding"][0] += 1.0
    torch.save(stored, path)


DAMAGED_ENTRIES = {
    "garbage": lambda path: path.write_bytes(b"not a torch file"),
    "empty": lambda path: path.write_bytes(b""),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "changed embedding": flip_embedding_byte,
    "not a dict": lambda path: torch.save([1, 2, 3], path),
    "no embedding": lambda path: torch.save({"content": torch.load(path, weights_only=True)["content"]}, path),
    "written before checksums": lambda path: torch.save(
        {key: value for key, value in torch.load(path, weights_only=True).items() if key != "checksum"}, path
    ),
}


@pytest.mark.parametrize("damage", DAMAGED_ENTRIES)
def test_a_damaged_disk_entry_is_a_miss_recomputed_and_rewritten(tiny_model_dir, tmp_path, damage):
    first = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    first.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    expected = first.encode_texts(["a dog", "a cat"])
    (entry,) = [path for path in (tmp_path / "cache").rglob("*.pt") if torch.load(path)["content"] == "a dog"]
    DAMAGED_ENTRIES[damage](entry)

    second = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    second.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    # recomputed alone, not in the first call's batch: equal within fp32 tolerance
    torch.testing.assert_close(second.encode_texts(["a dog", "a cat"]), expected, atol=1e-6, rtol=0)
    assert (second.embedding_cache.hits, second.embedding_cache.misses) == (1, 1)
    third = PACSModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    third.embedding_cache = EmbeddingCache(directory=tmp_path / "cache")
    torch.testing.assert_close(third.encode_texts(["a dog"]), expected[:1], atol=1e-6, rtol=0)
    assert (third.embedding_cache.hits, third.embedding_cache.misses) == (1, 0)  # the entry was rewritten
