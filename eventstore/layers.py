"""Layers and their contract: the schema shared by the hub (which enforces it) and the projections
(which render each shared layer at its path)."""

from typing import Literal

import msgspec

class ContractLayer(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    format: Literal["pages", "entries"]
    producers: list[str]
    consumers: list[str]
    scan_secrets: bool = True


class Contract(msgspec.Struct, forbid_unknown_fields=True):
    layers: dict[str, ContractLayer] = {}
