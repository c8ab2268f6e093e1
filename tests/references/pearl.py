"""Pearl's forward (`PearlEstimator.forward`, hiranohachiman/Pearl `pearl/models/estimators/pearl_estimator.py:484-692`)
in NumPy float64, eval mode, reading a state dict keyed as Pearl's Lightning checkpoints key it (`diff_feature_mlp1`,
`hadamard_net1.network.*`, `mlp1`, `transformer.layers.*`, `learnable_query1`, `cross_attention`, `ff`, `ff2`).

Written from the step-by-step description of the forward (notes-research/pearl_checkpoint.md §2), not from
modeling_pacs: it shares no code with the port. Items come in the authors' format, one dict per item:

    {"clip_img": [d], "clip_mt": [d], "clip_refs": [[d], ...],          # CLIP (zero-padded to the feature size E)
     "blip_img": [T, b], "blip_mt": [b], "blip_refs": [[b], ...],       # BLIP-2: T query tokens, zero-padded to E
     "beit3_img": [E], "beit3_mt": [E], "beit3_refs": [[E], ...],
     "stella_mt": [E], "stella_refs": [[E], ...]}

References that are `None` are skipped and the first 5 valid ones are packed, as `process_refs_features` does.
"""

import numpy as np

MAX_REFS = 5  # pearl_estimator.py:517
LAMBDA = 0.5  # pearl_estimator.py:683
BATCH_NORM_EPS = 1e-5
LAYER_NORM_EPS = 1e-5


def numpy_weights(state_dict) -> dict[str, np.ndarray]:
    return {key: value.detach().cpu().double().numpy() for key, value in state_dict.items()}


def linear(weights, prefix: str, x: np.ndarray) -> np.ndarray:
    return x @ weights[f"{prefix}.weight"].T + weights[f"{prefix}.bias"]


def pad(x: np.ndarray, size: int) -> np.ndarray:
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def diff_feature(weights, index: int, u: np.ndarray, c: np.ndarray) -> np.ndarray:
    """IndependentFeatureMLP("diff"): einsum("bfi,fi->bf", stack((u, c), -1), weight) + bias."""
    weight = weights[f"diff_feature_mlp{index}.weight"]
    return u * weight[:, 0] + c * weight[:, 1] + weights[f"diff_feature_mlp{index}.bias"]


def hadamard(weights, index: int, u: np.ndarray, c: np.ndarray) -> np.ndarray:
    """HadamardNet: [N, 2, E, 1] through 1x1 Conv2d + BatchNorm2d (running statistics) + ReLU blocks, then a last
    Conv2d to one channel. A 1x1 convolution mixes the channels of each coordinate separately."""
    prefix = f"hadamard_net{index}.network"
    x = np.stack([u, c], axis=-1)  # [N, E, channels]
    block = 0
    while f"{prefix}.{block + 1}.running_mean" in weights:
        convolution, norm = f"{prefix}.{block}", f"{prefix}.{block + 1}"
        x = x @ weights[f"{convolution}.weight"][:, :, 0, 0].T + weights[f"{convolution}.bias"]
        x = (x - weights[f"{norm}.running_mean"]) / np.sqrt(weights[f"{norm}.running_var"] + BATCH_NORM_EPS)
        x = np.maximum(x * weights[f"{norm}.weight"] + weights[f"{norm}.bias"], 0.0)
        block += 4
    last = f"{prefix}.{block}"
    return (x @ weights[f"{last}.weight"][:, :, 0, 0].T + weights[f"{last}.bias"])[..., 0]


def adapter(weights, index: int, x: np.ndarray) -> np.ndarray:
    """mlpN: Linear(E, 2E), Dropout, ReLU, Linear(2E, E)."""
    return linear(weights, f"mlp{index}.3", np.maximum(linear(weights, f"mlp{index}.0", x), 0.0))


def arsm_token(weights, index: int, u: np.ndarray, c: np.ndarray) -> np.ndarray:
    """[mlpN(diff_feature_mlpN(u, c)); mlpN(hadamard_netN(u, c))]: one 2E token per pair."""
    return np.concatenate(
        [
            adapter(weights, index, diff_feature(weights, index, u, c)),
            adapter(weights, index, hadamard(weights, index, u, c)),
        ],
        axis=-1,
    )


def layer_norm(weights, prefix: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPS) * weights[f"{prefix}.weight"] + weights[f"{prefix}.bias"]


def attention(weights, prefix: str, query: np.ndarray, key: np.ndarray, num_heads: int) -> np.ndarray:
    """nn.MultiheadAttention with a packed in-projection, key = value, no mask; [B, Lq, D]."""
    dim = query.shape[-1]
    in_weight, in_bias = weights[f"{prefix}.in_proj_weight"], weights[f"{prefix}.in_proj_bias"]
    q = query @ in_weight[:dim].T + in_bias[:dim]
    k = key @ in_weight[dim : 2 * dim].T + in_bias[dim : 2 * dim]
    v = key @ in_weight[2 * dim :].T + in_bias[2 * dim :]

    def heads(x):
        return x.reshape(x.shape[0], x.shape[1], num_heads, dim // num_heads).transpose(0, 2, 1, 3)

    logits = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(dim // num_heads)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    attended = (probabilities @ heads(v)).transpose(0, 2, 1, 3).reshape(query.shape)
    return linear(weights, f"{prefix}.out_proj", attended)


def transformer(weights, x: np.ndarray, num_heads: int) -> np.ndarray:
    """nn.TransformerEncoder of post-LN layers (ReLU FFN), batch_first, no mask."""
    layer = 0
    while f"transformer.layers.{layer}.norm1.weight" in weights:
        prefix = f"transformer.layers.{layer}"
        x = layer_norm(weights, f"{prefix}.norm1", x + attention(weights, f"{prefix}.self_attn", x, x, num_heads))
        feedforward = linear(weights, f"{prefix}.linear2", np.maximum(linear(weights, f"{prefix}.linear1", x), 0.0))
        x = layer_norm(weights, f"{prefix}.norm2", x + feedforward)
        layer += 1
    return x


def summarise(weights, tokens: np.ndarray, num_heads: int) -> np.ndarray:
    """pos_encoder (pe[:L] added on the [L, B, D] view), transformer, learnable_query1 cross-attention, flatten."""
    hidden = transformer(weights, tokens + weights["pos_encoder.pe"][: tokens.shape[1], 0][None], num_heads)
    queries = np.broadcast_to(weights["learnable_query1"], (tokens.shape[0], *weights["learnable_query1"].shape[1:]))
    return attention(weights, "cross_attention", queries, hidden, num_heads).reshape(tokens.shape[0], -1)


def head(weights, name: str, x: np.ndarray) -> np.ndarray:
    """FeedForward (Linear + Tanh per hidden size, final_activation False) and the outer nn.Sigmoid; [B]."""
    index = 1
    while f"{name}.0.ff.linear_{index + 1}.weight" in weights:
        x = np.tanh(linear(weights, f"{name}.0.ff.linear_{index}", x))
        index += 1
    return sigmoid(linear(weights, f"{name}.0.ff.linear_{index}", x))[:, 0]


def pack_references(items: list[dict], key: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The first MAX_REFS non-None references of each item in [B, 5, size] zeros, and the [B, 5] mask."""
    features = np.zeros((len(items), MAX_REFS, size))
    mask = np.zeros((len(items), MAX_REFS), dtype=bool)
    for row, item in enumerate(items):
        valid = [reference for reference in item[key] if reference is not None][:MAX_REFS]
        for slot, reference in enumerate(valid):
            features[row, slot, : len(reference)] = reference
            mask[row, slot] = True
    return features, mask


def pearl_forward(
    weights: dict[str, np.ndarray], items: list[dict], num_heads: int = 8, lambda_img: float = LAMBDA
) -> dict[str, np.ndarray]:
    """Scores of `items` (one batch): `score` [B], `img_score` [B], `ref_score` [B], `ref_scores` [B, 5].

    `lambda_img` is the authors' `LAMBDA * img_score + (1 - LAMBDA) * ref_score` weight (0.5 in their code).
    """
    size = weights["diff_feature_mlp1.weight"].shape[0]  # Pearl hard-codes 768, its E

    def stacked(key):
        return np.stack([np.asarray(item[key], dtype=np.float64) for item in items])

    clip_img, clip_mt = pad(stacked("clip_img"), size), pad(stacked("clip_mt"), size)
    blip_img, blip_mt = pad(stacked("blip_img"), size), pad(stacked("blip_mt"), size)
    beit3_img, beit3_mt, stella_mt = stacked("beit3_img"), stacked("beit3_mt"), stacked("stella_mt")

    # Img-GEM: (CLIP, BEiT-3, BLIP-2 query 1..T), each query token paired with the same candidate vector.
    tokens = [arsm_token(weights, 1, clip_img, clip_mt), arsm_token(weights, 3, beit3_img, beit3_mt)]
    tokens += [arsm_token(weights, 2, blip_img[:, query], blip_mt) for query in range(blip_img.shape[1])]
    img_score = head(weights, "ff", summarise(weights, np.stack(tokens, axis=1), num_heads))

    packed = {key: pack_references(items, f"{key}_refs", size) for key in ("clip", "blip", "beit3", "stella")}
    masks = [mask for _, mask in packed.values()]
    assert all((mask == masks[0]).all() for mask in masks), "every encoder needs features of the same references"
    ref_scores = np.zeros((len(items), MAX_REFS))
    for slot in range(MAX_REFS):  # every slot runs, empty ones too; masked slots score 0
        slot_tokens = np.stack(
            [
                arsm_token(weights, 4, packed["blip"][0][:, slot], blip_mt),
                arsm_token(weights, 5, packed["beit3"][0][:, slot], beit3_mt),
                arsm_token(weights, 6, packed["stella"][0][:, slot], stella_mt),
            ],
            axis=1,
        )
        slot_score = head(weights, "ff2", summarise(weights, slot_tokens, num_heads))
        ref_scores[:, slot] = np.where(masks[0][:, slot], slot_score, 0.0)
    ref_score = ref_scores.max(axis=1)
    score = np.where(packed["clip"][1].any(axis=1), lambda_img * img_score + (1 - lambda_img) * ref_score, img_score)
    return {"score": score, "img_score": img_score, "ref_score": ref_score, "ref_scores": ref_scores}
