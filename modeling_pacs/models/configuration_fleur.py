"""FLEUR configuration (docs/spec/fleur.md): a LLaVA-1.5 judge, the authors' prompts and conversation template, the
generation settings and the score smoothing of Lee et al. (ACL 2024)."""

from transformers import PreTrainedConfig

# The prompts of `Yebin46/FLEUR`, verbatim: fleur.py:74 (FLEUR), reffleur.py:74 (RefFLEUR), fleur_exp.py:92 (the
# explanation turn). `{candidate}` is the caption, `{reference}` the references joined by `reference_separator`.
FLEUR_PROMPT = (
    "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. "
    "(Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at all.\n"
    "1.0: The caption accurately and clearly describes the image.\n\nCaption: {candidate}\n\n"
    "Score(Choose a rating from 0.0 to 1.0):"
)
REF_FLEUR_PROMPT = (
    "Your task is to evaluate and rate the candidate caption on a scale of 0.0 to 1.0 based on the given Grading "
    "Criteria. (Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at "
    "all.\n1.0: The caption accurately and clearly describes the image.\n\nReference Captions: {reference}\n\n"
    "Candidate Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"
)
EXPLANATION_PROMPT = "Why? Tell me the reason."
# LLaVA's `conv_llava_v1` (llava/conversation.py:335, SeparatorStyle.TWO)
LLAVA_V1_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, "
    "and polite answers to the human's questions."
)


class FleurConfig(PreTrainedConfig):
    r"""
    Configuration of a [`FleurModel`][modeling_pacs.models.modeling_fleur.FleurModel] (docs/spec/fleur.md): the
    LLaVA-1.5 it asks, and everything that changes the number. Defaults reproduce `Yebin46/FLEUR`.

    Args:
        llava_config (`dict`): the `LlavaConfig` of the judge (transformers' layout, `llava-hf/llava-1.5-13b-hf`).
        llava_model (`str`): where the judge came from (a Hub id or a directory), for the record.
        prompt (`str`), ref_prompt (`str`), explanation_prompt (`str`): the FLEUR, RefFLEUR and explanation
            prompts, verbatim from the authors' code.
        reference_separator (`str`, defaults to `"\n"`): how references are joined (`'\n'.join(ground_truth)`).
        system (`str`), roles (`list[str]`), sep (`str`), sep2 (`str`): LLaVA's `llava_v1` conversation template.
        image_token (`str`, defaults to `"<image>"`): where the image goes: `"<image>\n"` before the first message.
        image_aspect_ratio (`str`, defaults to `"pad"`): `pad` pastes the image on a square of the processor's mean
            colour before resizing (LLaVA's `expand2square`); `resize` leaves it to the processor.
        original_vocab_size (`int`): the vocabulary of the original checkpoint (32000); the llava-hf checkpoints
            pad theirs, and the smoothing's softmax and the greedy choice run over the original one only.
        max_new_tokens (`int`, defaults to 512): the authors' generation limit; answers stop at `</s>`.
        explanation_max_new_tokens (`int`, defaults to 512): the limit of the explanation turn.
        smoothing (`str`, defaults to `"fleur"`): the score smoothing (docs/spec/fleur.md#smoothing); `"none"`
            returns the printed number.
        normalize_whitespace (`bool`, defaults to `True`): `' '.join(caption.split())`, as the authors' loader does.

    Example:

    ```python
    >>> from modeling_pacs.models.configuration_fleur import FleurConfig
    >>> config = FleurConfig()
    >>> config.score_names, config.sep2, config.original_vocab_size
    (('FLEUR', 'RefFLEUR'), '</s>', 32000)
    ```
    """

    model_type = "fleur"

    llava_config: dict | None = None
    llava_model: str = "llava-hf/llava-1.5-13b-hf"
    prompt: str = FLEUR_PROMPT
    ref_prompt: str = REF_FLEUR_PROMPT
    explanation_prompt: str = EXPLANATION_PROMPT
    reference_separator: str = "\n"
    system: str = LLAVA_V1_SYSTEM
    roles: list | None = None
    sep: str = " "
    sep2: str = "</s>"
    image_token: str = "<image>"
    image_aspect_ratio: str = "pad"
    original_vocab_size: int = 32000
    max_new_tokens: int = 512
    explanation_max_new_tokens: int = 512
    smoothing: str = "fleur"
    normalize_whitespace: bool = True

    def __post_init__(self, **kwargs):
        if self.roles is None:
            self.roles = ["USER", "ASSISTANT"]
        if self.llava_config is None:
            self.llava_config = {}
        if self.smoothing not in ("fleur", "none"):
            raise ValueError(f"FleurConfig.smoothing must be 'fleur' or 'none', got {self.smoothing!r}")
        if self.image_aspect_ratio not in ("pad", "resize"):
            raise ValueError(
                f"FleurConfig.image_aspect_ratio must be 'pad' or 'resize', got {self.image_aspect_ratio!r}"
            )
        for field in ("original_vocab_size", "max_new_tokens", "explanation_max_new_tokens"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"FleurConfig.{field} must be a positive integer, got {value!r}")
        super().__post_init__(**kwargs)

    @property
    def score_names(self) -> tuple[str, str]:
        return ("FLEUR", "RefFLEUR")


__all__ = ["FleurConfig"]
