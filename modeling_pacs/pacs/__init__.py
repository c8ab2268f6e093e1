"""PAC-S++, PAC-S and CLIP-S outside the remote code: the converter of the official checkpoints, training with
positive-augmented contrastive learning, the model card and the loader of PAC-S models.

The model itself (`PACSModel`, `PACSConfig`) is remote code and lives in `modeling_pacs.models`. Each metric has a
folder like this one (`polos/`, `pearl/`): a new metric's converter and training go in a new folder beside them.
"""
