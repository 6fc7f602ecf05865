"""The namespace: directories, names, inodes, symlinks, hard links and xattrs,
kept in the catalog. Its rooms:

- ``rows``: the tables row by row (``NamespaceRows``, for bulk writers too),
  the memory of them the request path answers from (``NamespaceMemo``), the
  inode (``Inode``) and the one rule for a name (``name_problem``)
- ``tree``: ``Namespace``, POSIX's rules over those rows, with the journal
- ``damage``: ``TreeDamage``, the questions fsck asks of the rows (names
  that lead nowhere, link counts) and the row changes that mend them
"""
from .rows import (NAME_MAX, ROOT_INODE, Inode, NamespaceMemo, NamespaceRows, check_name,
                   name_problem, now_ns)
from .tree import Namespace

__all__ = ["NAME_MAX", "ROOT_INODE", "Inode", "Namespace", "NamespaceMemo", "NamespaceRows",
           "check_name", "name_problem", "now_ns"]
