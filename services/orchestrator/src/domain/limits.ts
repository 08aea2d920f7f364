import { conflict, type LimitName } from '@kandev/contracts';

/**
 * refuse one more of something past its cap. `current` is how many there are before this
 * one; `max` 0 means no cap. The CONFLICT names the limit, its value and the current count, so
 * an agent (or its operator) can tell which bound it hit and by how much.
 */
export function assertUnderLimit(limit: LimitName, current: number, max: number, what: string): void {
  if (max > 0 && current >= max) throw conflict(`${what}: limit ${limit} is ${max} and ${current} already exist`, { limit, max, current });
}

/** A child of a task at `parentLevel` (a root is level 1) is at `parentLevel + 1`; refused past `maxDepth` levels. */
export function assertDepth(parentLevel: number, maxDepth: number): void {
  if (maxDepth > 0 && parentLevel + 1 > maxDepth)
    throw conflict(`a child here would be at level ${parentLevel + 1}: limit tree_depth is ${maxDepth} levels`, {
      limit: 'tree_depth',
      max: maxDepth,
      current: parentLevel,
    });
}
