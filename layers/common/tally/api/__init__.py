"""The merchant's API edge (POST/GET /orders, /refunds): pydantic models of every request and answer
(models.py), parsing and public shaping (edge.py), the error codes (codes.py) and the OpenAPI document built
from them (openapi.py, committed as docs/openapi.json). Only the orders and refunds functions import it:
pydantic costs ~53 ms of import, which notify and the other functions never pay (.importlinter)."""
