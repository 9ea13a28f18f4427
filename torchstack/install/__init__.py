"""The EasyBuild side: the steps both easyblocks call, the hooks file, the install checks."""
