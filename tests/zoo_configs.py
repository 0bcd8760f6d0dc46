"""Small transformers configs for the readiness zoo (random weights, nothing downloads).

One entry per architecture family the check must handle: text encoders, decoders, encoder-decoders, audio,
vision CNNs and transformers, mixture-of-experts. Sizes are the smallest each architecture accepts, so the
whole zoo exports in about a minute. FAMILY says which family each belongs to; docs/readiness.md ("Zoo")
justifies every finding the test expects.
"""

from __future__ import annotations

_CORE = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256}
_TEXT = {**_CORE, "intermediate_size": 64, "max_position_embeddings": 66}
_SEQ2SEQ = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "vocab_size": 256,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
}
_VIT = {**_TEXT, "image_size": 32, "patch_size": 8}
_CNN = {"hidden_sizes": [16, 32], "depths": [1, 1], "image_size": 32}

CONFIGS: dict[str, dict] = {
    # text encoders
    "albert": {"model_type": "albert", "embedding_size": 16, **_TEXT},
    "electra": {"model_type": "electra", "embedding_size": 16, **_TEXT},
    "deberta-v2": {"model_type": "deberta-v2", **_TEXT},
    "xlm-roberta": {"model_type": "xlm-roberta", **_TEXT, "architectures": ["XLMRobertaForMaskedLM"]},
    "mpnet": {"model_type": "mpnet", **_TEXT},
    # decoders
    "qwen2": {
        "model_type": "qwen2",
        "num_key_value_heads": 2,
        **_TEXT,
        "architectures": ["Qwen2ForCausalLM"],
    },
    "phi3": {"model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0, **_TEXT},
    "gemma2": {"model_type": "gemma2", "num_key_value_heads": 2, "head_dim": 8, **_TEXT},
    "gpt_neox": {"model_type": "gpt_neox", **_TEXT, "architectures": ["GPTNeoXForCausalLM"]},
    "opt": {
        "model_type": "opt",
        **_CORE,
        "ffn_dim": 64,
        "max_position_embeddings": 66,
        "word_embed_proj_dim": 32,
        "architectures": ["OPTForCausalLM"],
    },
    "falcon": {"model_type": "falcon", **_CORE},
    # encoder-decoders (text and speech)
    "bart": {"model_type": "bart", **_SEQ2SEQ, "max_position_embeddings": 66},
    "marian": {
        "model_type": "marian",
        **_SEQ2SEQ,
        "max_position_embeddings": 66,
        "architectures": ["MarianMTModel"],
    },
    "whisper": {
        "model_type": "whisper",
        **_SEQ2SEQ,
        "num_mel_bins": 16,
        "max_source_positions": 16,
        "max_target_positions": 32,
        "architectures": ["WhisperForConditionalGeneration"],
    },
    # audio encoder
    "wav2vec2": {
        "model_type": "wav2vec2",
        **_TEXT,
        "conv_dim": [16, 16],
        "conv_stride": [5, 2],
        "conv_kernel": [10, 3],
        "num_feat_extract_layers": 2,
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4,
    },
    # vision CNNs
    "resnet": {
        "model_type": "resnet",
        "embedding_size": 16,
        **_CNN,
        "layer_type": "basic",
        "architectures": ["ResNetForImageClassification"],
    },
    "convnext": {"model_type": "convnext", **_CNN, "num_stages": 2},
    "regnet": {"model_type": "regnet", "embedding_size": 8, **_CNN, "groups_width": 8},
    # vision transformers
    "swin": {
        "model_type": "swin",
        "image_size": 32,
        "patch_size": 4,
        "embed_dim": 16,
        "depths": [1, 1],
        "num_heads": [2, 2],
        "window_size": 4,
        "architectures": ["SwinForImageClassification"],
    },
    "deit": {"model_type": "deit", **_VIT},
    "clip_vision_model": {"model_type": "clip_vision_model", **_VIT},
    "dinov2": {"model_type": "dinov2", **_VIT},
    # mixture of experts
    "mixtral": {
        "model_type": "mixtral",
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        **_TEXT,
        "architectures": ["MixtralForCausalLM"],
    },
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        **_TEXT,
    },
}

FAMILY = {
    **dict.fromkeys(("albert", "electra", "deberta-v2", "xlm-roberta", "mpnet"), "text encoder"),
    **dict.fromkeys(("qwen2", "phi3", "gemma2", "gpt_neox", "opt", "falcon"), "decoder"),
    **dict.fromkeys(("bart", "marian", "whisper"), "encoder-decoder"),
    "wav2vec2": "audio encoder",
    **dict.fromkeys(("resnet", "convnext", "regnet"), "vision CNN"),
    **dict.fromkeys(("swin", "deit", "clip_vision_model", "dinov2"), "vision transformer"),
    **dict.fromkeys(("mixtral", "qwen2_moe"), "mixture of experts"),
}
# the shipped tiny presets cover 8 more architectures (bert, distilbert, roberta, gpt2, llama, mistral, t5,
# vit)
PRESETS = {
    "tiny-bert": "text encoder",
    "tiny-distilbert": "text encoder",
    "tiny-roberta": "text encoder",
    "tiny-gpt2": "decoder",
    "tiny-llama": "decoder",
    "tiny-mistral": "decoder",
    "tiny-t5": "encoder-decoder",
    "tiny-vit": "vision transformer",
}
# the routing module of each MoE config: the one finding the zoo expects (CHIP_MOE_ROUTING)
MOE_EXPERTS = {"mixtral": "MixtralExperts", "qwen2_moe": "Qwen2MoeExperts"}
