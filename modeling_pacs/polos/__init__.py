"""Polos outside the remote-code model: tiny models, conversion of the released checkpoint, training on Polaris."""
