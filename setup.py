"""pacs-pp: PAC-S++ captioning metrics (image and video) as a HuggingFace-native model, metric and trainer."""

from pathlib import Path

from setuptools import find_packages, setup

README = Path(__file__).parent / "README.md"

setup(
    name="pacs-pp",
    version="0.1.0",
    description="PAC-S++ / PAC-S / CLIP-S captioning metrics on transformers + PEFT: scoring, training, evaluate",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["modeling_pacs", "modeling_pacs.*"]),
    package_data={"modeling_pacs": ["assets/*", "metric_module/*", "metric_module/script/*"]},
    include_package_data=True,
    # torch is constrained by `constraints.txt` in scripts/setup.sh (CPU build); GPU users keep the torch they have.
    install_requires=[
        "torch>=2.1",
        "transformers>=5.0,<6",
        "peft>=0.17",
        "safetensors>=0.4",
        "huggingface_hub>=1.0",
        "datasets>=3.0",
        "evaluate>=0.4.3",
        "accelerate>=1.0",
        "numpy",
        "pillow",
        "ftfy",
        "regex",
        "tqdm",
    ],
    extras_require={
        "train": ["datasets>=3.0", "accelerate>=1.0", "scipy"],
        "video": ["av>=12"],
        "benchmarks": ["scipy", "matplotlib"],
        # scripts/generate_synthetic.py: Stable Diffusion (BLIP comes with transformers)
        "generate": ["diffusers>=0.30", "datasets>=3.0", "accelerate>=1.0", "pyarrow"],
        # SigLIP's tokenizer is sentencepiece-based (SiglipTokenizer); SigLIP 2's needs only `tokenizers`.
        "siglip": ["sentencepiece>=0.2", "protobuf"],
        # Pearl: BEiT-3's XLM-R tokenizer is built from its sentencepiece model; validation Kendall tau via scipy.
        "pearl": ["sentencepiece>=0.2", "protobuf>=4", "scipy"],
        "demo": ["gradio>=5,<7", "gradio_client", "pandas"],
        # SCST captioner: BLEU-4 / CIDEr(-D) in reports and rewards; TRL for the GRPO reward-function example.
        "captioning": ["pycocoevalcap==1.2", "trl>=1.16,<2"],
        # The torchmetrics Metrics (ModelMetric, PACSppMetric, ...): PAC-S++ logged in a Lightning validation step.
        "torchmetrics": ["torchmetrics>=1.0"],
        # Test tools, and the documentation site (mkdocs build --strict in CI and in tests/test_docs.py).
        "dev": [
            "pytest",
            "pytest-timeout",
            "pytest-xdist",
            "ruff",
            "torchmetrics==1.9.0",
            "scipy",
            "pandas",
            "pyarrow",
            "playwright",
            "mkdocs>=1.6,<2",
            "mkdocs-material>=9.5,<10",
            "mkdocstrings[python]>=0.30",
            # the formulas of the docs, rendered to MathML when the site is built (docs/hooks/mathml.py)
            "latex2mathml>=3.77",
        ],
    },
    entry_points={
        "console_scripts": [
            "pacs-score=modeling_pacs.cli:score_main",
            "pacs-pp=modeling_pacs.cli:main",
        ]
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: MIT License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
