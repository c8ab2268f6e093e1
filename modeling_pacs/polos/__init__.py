"""Polos outside the remote code: conversion of the released Lightning checkpoint and training on Polaris.

The model (`PolosModel`, `PolosConfig`) is remote code in `models/`; its tiny builder is in `testing/polos.py`.
"""
