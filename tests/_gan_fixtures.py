"""Tiny overrides of the 32 x 32 complement GAN recipes (conv networks, PixelCNN++), for runs of a couple of
steps on the stand-in SVHN / CIFAR-10 files of _data_fixtures.stand_in_images (40 training images, 4 of a
class; 30 test images)."""

from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "complement_gan"

TINY_CONV = {"steps": 2, "labelled": 10, "labelled_batch": 10, "unlabelled_batch": 8, "init_batch": 16,
             "model.conv_widths": [4, 8], "model.encoder_hidden": [8], "ld_reference": 20, "ld_batch": 4,
             "ld_every": 1, "ld_start": 0, "train.eval_every": 1, "train.save_every": 2, "train.progress": False}
"""2 steps (one D, one G), an evaluation after each; LD (where a recipe has it) from the first generator step."""

TINY_PIXELCNN = {"steps": 2, "model.filters": 4, "model.blocks": 1, "model.mixtures": 2, "model.dropout": 0.0,
                 "batch_size": 4, "eval_images": 10, "train.save_every": 2, "train.progress": False}
"""2 steps of a 4-filter, 1-block PixelCNN++ scored on 10 test images."""
