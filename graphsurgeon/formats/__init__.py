"""Readers and writers: text .param (lark grammar + jinja2 template), .param.bin, and .bin weights."""
