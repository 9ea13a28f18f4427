"""torchstack easyblocks, installed as package data; EasyBuild skips this file."""
