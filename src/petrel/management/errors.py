"""Errors the API answers with: a status and one line for the operator, as ``{"error": ...}``."""

from __future__ import annotations

from http import HTTPStatus

__all__ = ["ApiError", "bad_request", "conflict", "not_found"]


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str, *, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []  # e.g. WWW-Authenticate on a 401


def bad_request(message: str) -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, message)


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(HTTPStatus.NOT_FOUND, f"{kind} {name!r} does not exist")


def conflict(message: str) -> ApiError:
    return ApiError(HTTPStatus.CONFLICT, message)
