"""Tool profiles and global disables: what people and operators choose to offer."""
