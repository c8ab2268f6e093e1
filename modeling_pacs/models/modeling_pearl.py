"""Pearl: a learnable, reference-flexible caption metric on frozen encoder features (docs/spec/pearl.md).

The whole model is in this file. Per (GEM, encoder) an ARSM turns a pair of features (image or reference `u`,
candidate `c`) into one token `[adapter(DiffNet(u, c)); adapter(HadamardNet(u, c))]`; the shared VSS (sinusoidal
positions, a 2-layer transformer, an 8-query cross-attention) summarises the token sequence; an image head and a
reference head with a sigmoid give `y_img` and, per reference, `y_ref`; Eq. 3 fuses them with lambda = 0.5.
Only the modules the forward uses are built (docs/spec/pearl.md#a5: 103.55 M parameters with the default config).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from .artifacts import check_model_directory, explain_load_errors, warn_if_random_weights
from .configuration_pearl import PearlConfig
from .fast_clip import FastEncoderSlot
from .fast_pearl import FastPearlHead
from .scoring_pearl import fuse_pearl_scores, pearl_huber_loss

logger = logging.get_logger(__name__)


@dataclass
class PearlOutput(ModelOutput):
    """
    Output of [`PearlModel.forward`][modeling_pacs.PearlModel.forward].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*): summed Huber loss
            ([docs/spec/pearl.md#training](../spec/pearl.md#training)), with `labels`.
        score (`torch.FloatTensor` of shape `(batch_size,)`): Eq. 3, `lambda * img_score + (1 - lambda) * ref_score`
            for items with references, `img_score` for the others.
        img_score (`torch.FloatTensor` of shape `(batch_size,)`): Eq. 1, the image head's score.
        ref_score (`torch.FloatTensor` of shape `(batch_size,)`): Eq. 2, the best reference's score (0 without any).
        ref_scores (`torch.FloatTensor` of shape `(batch_size, num_refs)`): each reference's score, 0 on masked slots.
        has_refs (`torch.BoolTensor` of shape `(batch_size,)`): which items had at least one reference.
    """

    loss: torch.FloatTensor | None = None
    score: torch.FloatTensor | None = None
    img_score: torch.FloatTensor | None = None
    ref_score: torch.FloatTensor | None = None
    ref_scores: torch.FloatTensor | None = None
    has_refs: torch.BoolTensor | None = None


# --------------------------------------------------------------------------------------------------- positions
def sinusoidal_positions(max_positions: int, dim: int) -> torch.Tensor:
    """The `[max_positions, dim]` sine/cosine table of Pearl's `PositionalEncoding` (pearl_estimator.py:27-48)."""
    position = torch.arange(max_positions).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_positions, dim)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table


# --------------------------------------------------------------------------------------------------- modules
class PearlDiffNet(nn.Module):
    """Per-dimension `w1 * u + w2 * c + b`, initialised to `u - c` (docs/spec/pearl.md#arsm;
    `IndependentFeatureMLP`)."""

    def __init__(self, feature_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([[1.0, -1.0]]).repeat(feature_dim, 1))
        self.bias = nn.Parameter(torch.zeros(feature_dim))

    def reset_parameters(self):
        # transformers' init functions skip tensors that from_pretrained has already loaded.
        init.copy_(self.weight, torch.tensor([[1.0, -1.0]], device=self.weight.device).expand_as(self.weight))
        init.zeros_(self.bias)

    def forward(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return u * self.weight[:, 0] + c * self.weight[:, 1] + self.bias


class PearlHadamardNet(nn.Module):
    """A learned scalar map `f(u_k, c_k)` applied to every coordinate: 1x1 convolutions (docs/spec/pearl.md#arsm,
    hadamard.py).

    Module names match Pearl's `HadamardNet` (`network.0.weight`, ...), so its `hadamard.pth` loads as it is.
    """

    def __init__(self, channels: list[int]):
        super().__init__()
        layers = []
        previous = 2
        for width in channels:
            layers += [nn.Conv2d(previous, width, kernel_size=1), nn.BatchNorm2d(width), nn.ReLU(), nn.Dropout(0.0)]
            previous = width
        layers.append(nn.Conv2d(previous, 1, kernel_size=1))
        self.network = nn.Sequential(*layers)

    def forward(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """`u`, `c`: `[N, D]` -> `[N, D]`; BatchNorm statistics run over the N x D coordinates."""
        stacked = torch.stack((u, c), dim=1).unsqueeze(-1)
        return self.network(stacked).squeeze(-1).squeeze(1)


class PearlARSM(nn.Module):
    """One (GEM, encoder) ARSM: DiffNet and HadamardNet, each then the one adapter (pearl_estimator.py:573-600)."""

    def __init__(self, config: PearlConfig, input_dim: int):
        super().__init__()
        feature_dim = config.feature_dim
        self.input_dim = input_dim
        # A8: features wider than feature_dim get a learned projection (a deviation from Pearl, which only pads).
        self.input_projection = nn.Linear(input_dim, feature_dim) if input_dim > feature_dim else None
        self.diff_net = PearlDiffNet(feature_dim)
        self.hadamard_net = PearlHadamardNet(config.hadamard_channels)
        self.adapter = nn.Sequential(
            nn.Linear(feature_dim, 2 * feature_dim),
            nn.Dropout(config.dropout),
            nn.ReLU(),
            nn.Linear(2 * feature_dim, feature_dim),
        )
        self.feature_dim = feature_dim

    def match_dim(self, features: torch.Tensor) -> torch.Tensor:
        if self.input_projection is not None:
            return self.input_projection(features)
        return nn.functional.pad(features, (0, self.feature_dim - features.shape[-1]))

    def forward(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """`u`, `c`: `[N, input_dim]` -> `[N, 2 * feature_dim]`."""
        if self.training or self.input_projection is not None:
            u, c = self.match_dim(u), self.match_dim(c)
            hadamard = self.hadamard_net(u, c)  # training: BatchNorm statistics include the padded coordinates
        else:
            # Eval mode: a zero-padded coordinate gives HadamardNet's f(0, 0), so it runs on the real ones only.
            real = self.hadamard_net(u, c)
            padding_value = self.hadamard_net(u.new_zeros(1, 1), c.new_zeros(1, 1))
            hadamard = torch.cat([real, padding_value.expand(real.shape[0], self.feature_dim - real.shape[1])], 1)
            u, c = self.match_dim(u), self.match_dim(c)
        return torch.cat([self.adapter(self.diff_net(u, c)), self.adapter(hadamard)], dim=-1)


class PearlVSS(nn.Module):
    """Shared sequence summariser: sinusoidal positions + dropout, transformer, then learnable-query cross-attention."""

    def __init__(self, config: PearlConfig):
        super().__init__()
        dim = config.token_dim
        self.register_buffer("positions", sinusoidal_positions(config.max_positions, dim), persistent=False)
        self.position_dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=dim,
            nhead=config.num_heads,
            dim_feedforward=config.ffn_dim,
            dropout=config.dropout,
            batch_first=True,
        )
        self.transformer = nn.TransformerEncoder(layer, num_layers=config.num_layers, enable_nested_tensor=False)
        self.queries = nn.Parameter(torch.empty(1, config.num_queries, dim))
        nn.init.xavier_uniform_(self.queries)
        self.cross_attention = nn.MultiheadAttention(dim, config.num_heads, dropout=config.dropout, batch_first=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """`[N, L, token_dim]` -> `[N, num_queries * token_dim]`."""
        hidden = self.position_dropout(tokens + self.positions[: tokens.shape[1]])
        hidden = self.transformer(hidden)
        queries = self.queries.expand(hidden.shape[0], -1, -1)
        attended, _ = self.cross_attention(query=queries, key=hidden, value=hidden, need_weights=False)
        return attended.flatten(1)


def build_head(config: PearlConfig) -> nn.Sequential:
    """Linear-Tanh-Dropout blocks then Linear(., 1) and a sigmoid (Pearl's FeedForward + nn.Sigmoid)."""
    layers = []
    previous = config.num_queries * config.token_dim
    for width in config.head_hidden_sizes:
        layers += [nn.Linear(previous, width), nn.Tanh(), nn.Dropout(config.dropout)]
        previous = width
    layers += [nn.Linear(previous, 1), nn.Sigmoid()]
    return nn.Sequential(*layers)


class PearlPreTrainedModel(PreTrainedModel):
    config: PearlConfig
    config_class = PearlConfig
    base_model_prefix = "pearl"
    main_input_name = "candidate_features"

    def _init_weights(self, module):
        # Modules keep PyTorch's own initialisation, as in Pearl; DiffNet restarts from u - c. The position table
        # is a non-persistent buffer: from_pretrained does not load it, so it is rebuilt here.
        if isinstance(module, PearlDiffNet):
            module.reset_parameters()
        elif isinstance(module, PearlVSS):
            init.copy_(module.positions, sinusoidal_positions(*module.positions.shape).to(module.positions.device))


class PearlModel(PearlPreTrainedModel):
    r"""
    Pearl ([docs/spec/pearl.md](../spec/pearl.md)): scores a candidate caption from frozen encoder features of its
    image and, optionally, of up to `config.max_refs` references. Without references the score is the image head's
    (the reference-free setting).

    Features come from the encoders of `modeling_pacs.encoders` (or a feature cache); HadamardNets start from the
    shipped multiplication pretraining (`modeling_pacs.pearl_init.initialise_hadamard_nets`).

    Example:

    ```python
    >>> import torch
    >>> from modeling_pacs import PearlConfig, PearlModel
    >>> config = PearlConfig(
    ...     image_encoders=[{"name": "clip", "dim": 8, "tokens": 1}, {"name": "blip2", "dim": 4, "tokens": 3}],
    ...     reference_encoders=[{"name": "blip2", "dim": 4}], encoder_specs={}, feature_dim=8, num_heads=2,
    ...     ffn_dim=16, num_queries=2, head_hidden_sizes=[8], hadamard_channels=[4])
    >>> model = PearlModel(config).eval()
    >>> out = model(
    ...     candidate_features={"clip": torch.randn(2, 8), "blip2": torch.randn(2, 4)},
    ...     image_features={"clip": torch.randn(2, 1, 8), "blip2": torch.randn(2, 3, 4)},
    ...     reference_features={"blip2": torch.randn(2, 5, 4)},
    ...     reference_mask=torch.tensor([[True] * 5, [False] * 5]))
    >>> out.score.shape
    torch.Size([2])
    ```
    """

    def __init__(self, config: PearlConfig):
        super().__init__(config)
        self.image_arsms = nn.ModuleDict(
            {encoder["name"]: PearlARSM(config, int(encoder["dim"])) for encoder in config.image_encoders}
        )
        self.reference_arsms = nn.ModuleDict(
            {encoder["name"]: PearlARSM(config, int(encoder["dim"])) for encoder in config.reference_encoders}
        )
        self.vss = PearlVSS(config)
        self.image_head = build_head(config)
        self.reference_head = build_head(config)
        # On CPU in fp32, eval mode without gradients, the head runs `fast_pearl` (same scores, less work).
        self.fast_cpu_head = True
        self._fast_head = FastEncoderSlot(FastPearlHead.build)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs) -> "PearlModel":
        """Load the head, after checking the directory's files (and its encoders' sub-folders)."""
        check_model_directory(pretrained_model_name_or_path)
        with explain_load_errors(pretrained_model_name_or_path):
            model = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        warn_if_random_weights(model.config, pretrained_model_name_or_path, logger)
        return model

    def fast_head(self) -> FastPearlHead | None:
        """The packed path of `fast_pearl` for the current weights, or None where it does not apply
        (`fast_cpu_head=False`, training mode, gradients enabled, not fp32 on CPU). Rebuilt when a weight changes."""
        if not self.fast_cpu_head or self.training or torch.is_grad_enabled():
            return None
        return self._fast_head.get(self)

    def image_tokens(self, candidate_features: dict, image_features: dict, arsms=None) -> torch.Tensor:
        """Img-GEM sequence `[B, sum(tokens), token_dim]`: each image token paired with the candidate feature.
        `arsms`: the ARSMs to run (default: the modules; `fast_head().image_arsms` on the fast path)."""
        arsms = self.image_arsms if arsms is None else arsms
        tokens = []
        for encoder in self.config.image_encoders:
            name = encoder["name"]
            image = image_features[name]
            if image.dim() == 2:
                image = image.unsqueeze(1)
            batch, count, dim = image.shape
            candidate = candidate_features[name].unsqueeze(1).expand(batch, count, dim)
            pair_tokens = arsms[name](image.reshape(-1, dim), candidate.reshape(-1, dim))
            tokens.append(pair_tokens.view(batch, count, -1))
        return torch.cat(tokens, dim=1)

    def reference_tokens(
        self, candidate_features: dict, reference_features: dict, rows, slots, arsms=None
    ) -> torch.Tensor:
        """Ref-GEM sequences `[N, num_ref_encoders, token_dim]` for the valid (row, slot) pairs only."""
        arsms = self.reference_arsms if arsms is None else arsms
        tokens = []
        for encoder in self.config.reference_encoders:
            name = encoder["name"]
            tokens.append(arsms[name](reference_features[name][rows, slots], candidate_features[name][rows]))
        return torch.stack(tokens, dim=1)

    def check_features(self, candidate_features: dict, image_features: dict, reference_features: dict | None):
        """Raise a ValueError naming the first encoder whose features are missing or of the wrong size."""
        groups = [("candidate_features", candidate_features, self.config.encoder_names)]
        groups.append(("image_features", image_features, [e["name"] for e in self.config.image_encoders]))
        if reference_features is not None:
            names = [e["name"] for e in self.config.reference_encoders]
            groups.append(("reference_features", reference_features, names))
        dims = {e["name"]: int(e["dim"]) for e in self.config.image_encoders + self.config.reference_encoders}
        for argument, features, names in groups:
            for name in names:
                if name not in features:
                    raise ValueError(f"{argument} has no '{name}' features: this Pearl uses {names}")
                if features[name].shape[-1] != dims[name]:
                    raise ValueError(
                        f"{argument}['{name}'] has size {features[name].shape[-1]}, the config says {dims[name]}: "
                        "extract features with the encoders this model was trained on"
                    )

    def forward(
        self,
        candidate_features: dict[str, torch.Tensor],
        image_features: dict[str, torch.Tensor],
        reference_features: dict[str, torch.Tensor] | None = None,
        reference_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> PearlOutput:
        """Score a batch from its features.

        Args:
            candidate_features: `{encoder: [B, dim]}` for every encoder of the config.
            image_features: `{encoder: [B, tokens, dim]}` for each image encoder.
            reference_features: `{encoder: [B, R, dim]}` for each reference encoder, `R <= max_refs`, or `None`.
            reference_mask: `[B, R]` bool, True on real references; `None` means all R slots are real.
            labels: `[B]` human scores in [0, 1]; gives `loss`.
        """
        self.check_features(candidate_features, image_features, reference_features)
        parts = self.fast_head() or self
        tokens = self.image_tokens(candidate_features, image_features, parts.image_arsms)
        img_score = parts.image_head(parts.vss(tokens)).squeeze(-1)
        batch = img_score.shape[0]
        if reference_features is None or not self.config.reference_encoders:
            reference_mask = torch.zeros(batch, 1, dtype=torch.bool, device=img_score.device)
        elif reference_mask is None:
            any_features = next(iter(reference_features.values()))
            reference_mask = torch.ones(any_features.shape[:2], dtype=torch.bool, device=img_score.device)
        reference_mask = reference_mask.bool()
        if reference_mask.shape[1] > self.config.max_refs:
            raise ValueError(
                f"got {reference_mask.shape[1]} reference slots but max_refs is {self.config.max_refs}: pass at most "
                f"{self.config.max_refs} references per candidate (PearlScorer keeps the first {self.config.max_refs})"
            )
        ref_scores = torch.zeros(reference_mask.shape, dtype=img_score.dtype, device=img_score.device)
        rows, slots = reference_mask.nonzero(as_tuple=True)
        if rows.numel():
            tokens = self.reference_tokens(candidate_features, reference_features, rows, slots, parts.reference_arsms)
            ref_scores = ref_scores.index_put((rows, slots), parts.reference_head(parts.vss(tokens)).squeeze(-1))
        score, ref_score, has_refs = fuse_pearl_scores(img_score, ref_scores, reference_mask, self.config.lambda_img)
        loss = None
        if labels is not None:
            labels = labels.to(img_score.dtype)
            loss = pearl_huber_loss(img_score, ref_score, has_refs, labels, self.config.huber_delta)
        return PearlOutput(
            loss=loss, score=score, img_score=img_score, ref_score=ref_score, ref_scores=ref_scores, has_refs=has_refs
        )


__all__ = ["PearlModel", "PearlOutput", "PearlPreTrainedModel"]
