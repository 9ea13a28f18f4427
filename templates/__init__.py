"""Jinja2 templates of torchstack, installed as package data."""
