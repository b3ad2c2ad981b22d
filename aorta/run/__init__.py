"""This rank's part of a sweep: the sweep loop, one trial in process or in a fresh worker,
process trees and deadlines, ranks and rendezvous, the profiler, the workload contract.
"""
