"""Opening an image file for a family's processor: fully decoded, every failure one ``ImageError`` naming
the file (a missing file, a folder, something Pillow cannot read, a corrupt or cut file, an image past
Pillow's decompression-bomb limit)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from graphsurgeon.errors import GsurgError

if TYPE_CHECKING:
    from PIL import Image as PILImage


class ImageError(GsurgError):
    """An image that cannot be read or processed (exit 2); names the file."""


def open_image(path: Path | str) -> PILImage.Image:
    """Open and fully decode an image file; anything Pillow cannot read is one ``ImageError``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            return img.copy()
    except FileNotFoundError:
        raise ImageError(f"{path}: no such image file") from None
    except IsADirectoryError:
        raise ImageError(f"{path}: a folder, not an image file") from None
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not an image Pillow can read") from None
    except Image.DecompressionBombError as err:
        raise ImageError(f"{path}: too large to open: {err}") from None
    except (OSError, ValueError, SyntaxError) as err:  # corrupt or cut short
        raise ImageError(f"{path}: cannot decode the image: {err}") from None
