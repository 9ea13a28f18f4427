"""The easyconfigs torchstack ships, as package data: eb reads only the *.eb."""
