"""testcluster"""
