"""Renderers: turn a Report into text. They never run code or read profilers."""
